//! What a create does to an object before it is stored (kube-apiserver's BeforeCreate and
//! the type's create strategy): the server-set metadata, defaulting, validation, the field
//! manager's first entry, and what the strategy and the admission plugins add (with the
//! namespace's ServiceAccounts a pod create reads, and the default StorageClass a claim
//! create reads). The defaulting and validation
//! ([`checks`]) are the ones an update runs too. Client creates and the server's own writes
//! (bootstrap objects, namespace defaults, APIServices) both go through [`prepare_create`],
//! so this module sits below the server state and the verb handlers.

use serde_json::{Value, json};

use super::apply;
use super::names::Cause;
use super::objects::{self, from_view, to_view};
use super::registry::{Backing, ResourceType};
use super::status::{ApiError, GroupResource};
use super::store::Store;

/// The string at `metadata.<key>` of `obj`, empty when there is none.
pub(crate) fn meta_str<'v>(obj: &'v Value, key: &str) -> &'v str {
    obj["metadata"][key].as_str().unwrap_or_default()
}

/// The 422 Invalid of the object `name` of `rt` for `causes`.
pub(crate) fn invalid(rt: &ResourceType, name: &str, causes: Vec<Cause>) -> ApiError {
    ApiError::invalid(&rt.kind, &rt.group, name, causes)
}

/// Runs schema pruning, defaulting and validation of a custom resource, then its schema's
/// validation rules (with `old`, the stored object in the same version, on an update).
fn custom_checks(
    rt: &ResourceType,
    version: &str,
    obj: &mut Value,
    old: Option<&Value>,
) -> Vec<Cause> {
    let mut causes = super::names::validate_object_meta(&obj["metadata"], objects::name_rule(rt));
    if let Backing::Custom { schemas, .. } = &rt.backing
        && let Some(schema) = schemas.get(version)
    {
        schema.prune(obj);
        schema.apply_defaults(obj);
        let found = schema.validate(obj);
        causes.extend(match old {
            Some(old) => {
                super::validation_rules::ratchet_schema_causes(schema.as_value(), obj, old, found)
            }
            None => found,
        });
        let rules = super::validation_rules::validate(schema.as_value(), obj, old, &causes);
        causes.extend(rules);
    }
    causes
}

/// Defaults and validates `obj` (already in stored form) for its type.
pub(crate) fn checks(
    rt: &ResourceType,
    version: &str,
    obj: &mut Value,
    old: Option<&Value>,
) -> Vec<Cause> {
    if rt.is_custom() {
        // Custom resources are validated in the version the client spoke.
        let mut view = to_view(rt, version, obj.clone());
        let old_view = old.map(|old| to_view(rt, version, old.clone()));
        let causes = custom_checks(rt, version, &mut view, old_view.as_ref());
        *obj = from_view(rt, view);
        causes
    } else {
        objects::apply_defaults(rt, obj);
        let mut causes = objects::validate(rt, obj, old);
        causes.extend(super::validation::validate(rt, obj));
        causes.extend(super::kinds::validate(rt, obj, old));
        causes
    }
}

/// Prepares a new object for storage (what BeforeCreate and the strategy do).
pub(crate) fn prepare_create(
    rt: &ResourceType,
    version: &str,
    namespace: &str,
    mut obj: Value,
    manager: &str,
    accounts: &objects::ServiceAccounts,
) -> Result<Value, ApiError> {
    let name = meta_str(&obj, "name").to_string();
    if !meta_str(&obj, "resourceVersion").is_empty() {
        return Err(ApiError::Internal(
            "resourceVersion should not be set on objects to be created".into(),
        ));
    }
    if !rt.namespaced {
        if let Some(m) = obj["metadata"].as_object_mut() {
            m.remove("namespace");
        }
    } else {
        obj["metadata"]["namespace"] = json!(namespace);
    }
    let now = objects::now();
    if let Some(m) = obj["metadata"].as_object_mut() {
        m.remove("deletionTimestamp");
        m.remove("deletionGracePeriodSeconds");
        m.remove("managedFields");
        m.remove("generation");
        m.insert("uid".into(), json!(uuid::Uuid::new_v4().to_string()));
        m.insert("creationTimestamp".into(), json!(now));
        if rt.generation != super::registry::GenerationRule::None {
            m.insert("generation".into(), json!(1));
        }
    }
    if rt.status
        && let Some(o) = obj.as_object_mut()
    {
        o.remove("status");
    }
    let causes = checks(rt, version, &mut obj, None);
    if !causes.is_empty() {
        return Err(invalid(rt, &name, causes));
    }
    // The field manager runs on the decoded (defaulted) object, before the strategy and the
    // mutating admission plugins add what nobody owns (endpoints/handlers/create.go).
    if rt.is_custom() {
        // A custom resource's manager is of the version the client spoke.
        let mut view = to_view(rt, version, obj.clone());
        apply::record_update(&json!({}), &mut view, manager, &rt.kind, &now, None);
        obj["metadata"]["managedFields"] = view["metadata"]["managedFields"].take();
    } else {
        apply::record_update(&json!({}), &mut obj, manager, &rt.kind, &now, None);
    }
    objects::prepare_for_create(rt, &mut obj, accounts, &super::names::random_suffix());
    Ok(obj)
}

/// The ServiceAccounts of `namespace` when `rt` is pods (what the ServiceAccount admission
/// plugin reads on a create), read before the write.
pub(crate) fn service_accounts(
    store: &Store,
    rt: &ResourceType,
    namespace: &str,
) -> objects::ServiceAccounts {
    if !(rt.group.is_empty() && rt.resource == "pods") {
        return objects::ServiceAccounts::default();
    }
    let (items, _) = store.list(&GroupResource::new("", "serviceaccounts"), Some(namespace));
    objects::ServiceAccounts::new(items)
}

/// The class the DefaultStorageClass admission plugin gives a new PersistentVolumeClaim of
/// `rt` that names none: of the StorageClasses annotated as the default
/// (`storageclass.kubernetes.io/is-default-class` or its beta form `"true"`), the newest,
/// then the first by name. `None` for other types or when no class is the default.
pub(crate) fn default_storage_class(store: &Store, rt: &ResourceType) -> Option<String> {
    if !(rt.group.is_empty() && rt.resource == "persistentvolumeclaims") {
        return None;
    }
    let (classes, _) = store.list(
        &GroupResource::new("storage.k8s.io", "storageclasses"),
        None,
    );
    let is_default = |class: &Value| {
        let annotations = &class["metadata"]["annotations"];
        [
            "storageclass.kubernetes.io/is-default-class",
            "storageclass.beta.kubernetes.io/is-default-class",
        ]
        .iter()
        .any(|key| annotations[*key] == "true")
    };
    // Stored timestamps are RFC 3339 in UTC to the second: their order is the text's.
    let created = |class: &Value| meta_str(class, "creationTimestamp").to_string();
    classes
        .iter()
        .filter(|class| is_default(class))
        .max_by(|a, b| {
            created(a)
                .cmp(&created(b))
                .then_with(|| meta_str(b, "name").cmp(meta_str(a, "name")))
        })
        .map(|class| meta_str(class, "name").to_string())
}

/// What the DefaultStorageClass admission plugin does to a claim being created: a claim
/// that names no class (no `spec.storageClassName`, not even `""`, and no beta
/// `volume.beta.kubernetes.io/storage-class` annotation) gets `default`. It runs after
/// the field manager, so the field has no owner, as on kube-apiserver.
pub(crate) fn admit_storage_class(default: Option<&str>, obj: &mut Value) {
    let Some(default) = default else { return };
    let names_a_class = !obj["spec"]["storageClassName"].is_null()
        || !obj["metadata"]["annotations"]["volume.beta.kubernetes.io/storage-class"].is_null();
    if !names_a_class && let Some(spec) = obj["spec"].as_object_mut() {
        spec.insert("storageClassName".into(), json!(default));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claim_naming_no_class_gets_the_default_and_one_naming_any_keeps_it() {
        let mut unnamed = json!({"metadata": {"name": "a"}, "spec": {"accessModes": []}});
        admit_storage_class(Some("standard"), &mut unnamed);
        assert_eq!(unnamed["spec"]["storageClassName"], "standard");

        let mut empty = json!({"metadata": {"name": "b"}, "spec": {"storageClassName": ""}});
        admit_storage_class(Some("standard"), &mut empty);
        assert_eq!(empty["spec"]["storageClassName"], "");

        let mut beta = json!({"metadata": {"name": "c", "annotations":
            {"volume.beta.kubernetes.io/storage-class": "fast"}}, "spec": {}});
        admit_storage_class(Some("standard"), &mut beta);
        assert!(beta["spec"].get("storageClassName").is_none());

        let mut no_default = json!({"metadata": {"name": "d"}, "spec": {}});
        admit_storage_class(None, &mut no_default);
        assert!(no_default["spec"].get("storageClassName").is_none());
    }
}

//! ControllerRevisions as upstream's `pkg/controller/history` makes and orders them: the
//! name `<parent>-<hash>`, the hash being FNV-1 (32 bits) over the revision's data and the
//! collision count, written with `rand.SafeEncodeString`; the `controller.kubernetes.io/hash`
//! label; ordering by revision number, then creation time, then name.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use serde_json::Value;

use super::support::{canonical_json, safe_encode, without_nulls};

/// The label holding a revision's hash (upstream's `ControllerRevisionHashLabel`).
pub(crate) const HASH_LABEL: &str = "controller.kubernetes.io/hash";

/// FNV-1 (not 1a), 32 bits: what Go's `hash/fnv.New32` computes.
fn fnv32(bytes: &[u8]) -> u32 {
    let mut hash: u32 = 0x811c_9dc5;
    for b in bytes {
        hash = hash.wrapping_mul(0x0100_0193);
        hash ^= u32::from(*b);
    }
    hash
}

/// JSON as Go's `encoding/json` writes a `map[string]interface{}`: keys sorted at every
/// level, and `<`, `>`, `&`, U+2028 and U+2029 escaped.
pub(crate) fn go_json(value: &Value) -> String {
    canonical_json(value)
        .replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026")
        .replace('\u{2028}', "\\u2028")
        .replace('\u{2029}', "\\u2029")
}

/// Upstream's `HashControllerRevision`: the hash of the data's bytes and, when given, the
/// collision count in decimal.
pub(crate) fn hash(data: &str, collision_count: Option<i32>) -> String {
    let mut bytes = data.as_bytes().to_vec();
    if let Some(count) = collision_count {
        bytes.extend_from_slice(count.to_string().as_bytes());
    }
    safe_encode(&fnv32(&bytes).to_string())
}

/// Upstream's `ControllerRevisionName`: the parent's name (at most 223 characters), a dash
/// and the hash.
pub(crate) fn revision_name(parent: &str, hash: &str) -> String {
    let prefix: String = parent.chars().take(223).collect();
    format!("{prefix}-{hash}")
}

/// Upstream's `getPatch` of StatefulSets and DaemonSets: the template, replacing the whole
/// template when applied (`{"spec":{"template":{…,"$patch":"replace"}}}`).
pub(crate) fn template_patch(template: &PodTemplateSpec) -> Value {
    let mut template = without_nulls(&serde_json::to_value(template).unwrap_or_default());
    if let Value::Object(map) = &mut template {
        map.insert("$patch".into(), Value::String("replace".into()));
    }
    serde_json::json!({"spec": {"template": template}})
}

/// The data of a revision as canonical JSON (what [`hash`] and equality work on).
pub(crate) fn data_of(revision: &ControllerRevision) -> Option<String> {
    revision.data.as_ref().map(|d| go_json(&d.0))
}

/// Upstream's `NewControllerRevision`: a revision of `data` owned by `owner`, labelled with
/// `template_labels` and its hash, named after `parent`.
pub(crate) fn new_revision(
    parent: &str,
    namespace: &str,
    owner: OwnerReference,
    template_labels: &BTreeMap<String, String>,
    data: &Value,
    revision: i64,
    collision_count: i32,
) -> ControllerRevision {
    let hash = hash(&go_json(data), Some(collision_count));
    let mut labels = template_labels.clone();
    labels.insert(HASH_LABEL.to_string(), hash.clone());
    ControllerRevision {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: Some(revision_name(parent, &hash)),
            namespace: Some(namespace.to_string()),
            labels: Some(labels),
            owner_references: Some(vec![owner]),
            ..Default::default()
        },
        data: Some(RawExtension(data.clone())),
        revision,
    }
}

/// Renames `revision` for another collision count (upstream's create loop).
pub(crate) fn rename(revision: &mut ControllerRevision, parent: &str, collision_count: i32) {
    let data = data_of(revision).unwrap_or_default();
    let hash = hash(&data, Some(collision_count));
    revision.metadata.name = Some(revision_name(parent, &hash));
}

/// Upstream's `EqualRevision`: the same data.
pub(crate) fn equal(a: &ControllerRevision, b: &ControllerRevision) -> bool {
    data_of(a) == data_of(b)
}

/// Upstream's `SortControllerRevisions`: by revision number, then creation time, then name.
pub(crate) fn sort(revisions: &mut [std::sync::Arc<ControllerRevision>]) {
    revisions.sort_by(|a, b| {
        a.revision
            .cmp(&b.revision)
            .then_with(|| {
                a.metadata
                    .creation_timestamp
                    .cmp(&b.metadata.creation_timestamp)
            })
            .then_with(|| a.metadata.name.cmp(&b.metadata.name))
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fnv1_multiplies_before_it_mixes_each_byte() {
        // Go: fnv.New32() over "a" is 0x050c5d7e; FNV-1a would give 0xe40c292c.
        assert_eq!(fnv32(b"a"), 0x050c_5d7e);
    }

    #[test]
    fn go_json_sorts_keys_and_escapes_html_characters() {
        let v = json!({"b": "<&>", "$patch": "replace", "a": {}});
        assert_eq!(
            go_json(&v),
            r#"{"$patch":"replace","a":{},"b":"\u003c\u0026\u003e"}"#
        );
    }

    #[test]
    fn revision_names_carry_the_safe_encoded_hash_of_data_and_collision_count() {
        let name = revision_name("web", &hash("{}", Some(0)));
        assert!(name.starts_with("web-"));
        assert_ne!(hash("{}", Some(0)), hash("{}", Some(1)));
        assert!(
            name["web-".len()..]
                .chars()
                .all(|c| "bcdfghjklmnpqrstvwxz2456789".contains(c))
        );
    }
}

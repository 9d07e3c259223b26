//! Small helpers the controllers share: API error classes, metav1 times, owner references,
//! pod readiness and availability, taints and tolerations, label and node selectors.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Node, NodeSelectorRequirement, NodeSelectorTerm, Pod, PodCondition, Taint, Toleration,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, ObjectMeta, OwnerReference, Time,
};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use serde_json::Value;

/// The HTTP code of an API error, if it is one.
pub(crate) fn code(error: &kube::Error) -> Option<u16> {
    match error {
        kube::Error::Api(status) => Some(status.code),
        _ => None,
    }
}

/// Whether an error is a 404.
pub(crate) fn is_not_found(error: &kube::Error) -> bool {
    code(error) == Some(404)
}

/// Whether an error is a 409 (conflict or failed precondition).
pub(crate) fn is_conflict(error: &kube::Error) -> bool {
    code(error) == Some(409)
}

/// An error with its causes, for logs.
pub(crate) use sim_apiserver::error_chain;

/// Now, truncated to whole seconds as metav1.Time is written (so that a time set here
/// compares equal to the same time read back from the server).
pub(crate) fn now() -> Time {
    Time(Timestamp::from_second(Timestamp::now().as_second()).unwrap_or_else(|_| Timestamp::now()))
}

/// Seconds from `earlier` to `later` (negative when `later` is before).
pub(crate) fn seconds_between(earlier: &Timestamp, later: &Timestamp) -> f64 {
    later.duration_since(*earlier).as_secs_f64()
}

/// `at` plus `seconds`.
pub(crate) fn plus_seconds(at: &Timestamp, seconds: i64) -> Timestamp {
    at.checked_add(SignedDuration::from_secs(seconds))
        .unwrap_or(*at)
}

/// How long from now until `at` (zero when past).
pub(crate) fn until(at: &Timestamp) -> std::time::Duration {
    let d = at.duration_since(Timestamp::now());
    if d.is_negative() {
        std::time::Duration::ZERO
    } else {
        d.unsigned_abs()
    }
}

/// The owner reference marked `controller: true`, if any.
pub(crate) fn controller_of(meta: &ObjectMeta) -> Option<&OwnerReference> {
    meta.owner_references
        .as_ref()?
        .iter()
        .find(|r| r.controller == Some(true))
}

/// A controller reference to an owner (`controller` and `blockOwnerDeletion` true), as
/// `metav1.NewControllerRef` makes.
pub(crate) fn controller_ref(api_version: &str, kind: &str, owner: &ObjectMeta) -> OwnerReference {
    OwnerReference {
        api_version: api_version.to_string(),
        kind: kind.to_string(),
        name: owner.name.clone().unwrap_or_default(),
        uid: owner.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// Whether `meta` carries `finalizer`.
pub(crate) fn has_finalizer(meta: &ObjectMeta, finalizer: &str) -> bool {
    meta.finalizers
        .as_ref()
        .is_some_and(|f| f.iter().any(|x| x == finalizer))
}

/// Whether the object is being deleted.
pub(crate) fn is_deleting(meta: &ObjectMeta) -> bool {
    meta.deletion_timestamp.is_some()
}

/// The pod's phase (`Pending` when unset).
pub(crate) fn phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("Pending")
}

/// Whether the pod has run to completion or failed.
pub(crate) fn is_terminal(pod: &Pod) -> bool {
    matches!(phase(pod), "Succeeded" | "Failed")
}

/// Whether the pod counts for a controller: not terminal and not being deleted
/// (`controller.IsPodActive`).
pub(crate) fn is_active(pod: &Pod) -> bool {
    !is_terminal(pod) && !is_deleting(&pod.metadata)
}

/// The pod's condition of a type.
pub(crate) fn pod_condition<'a>(pod: &'a Pod, type_: &str) -> Option<&'a PodCondition> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
}

/// Whether the pod's Ready condition is True.
pub(crate) fn is_ready(pod: &Pod) -> bool {
    pod_condition(pod, "Ready").is_some_and(|c| c.status == "True")
}

/// Whether the pod has been Ready for at least `min_ready_seconds` at `now`
/// (`podutil.IsPodAvailable`).
pub(crate) fn is_available(pod: &Pod, min_ready_seconds: i32, now: &Timestamp) -> bool {
    let Some(ready) = pod_condition(pod, "Ready").filter(|c| c.status == "True") else {
        return false;
    };
    if min_ready_seconds <= 0 {
        return true;
    }
    ready
        .last_transition_time
        .as_ref()
        .is_some_and(|t| plus_seconds(&t.0, i64::from(min_ready_seconds)) < *now)
}

/// When a Ready pod becomes available (`None` when not Ready or already available).
pub(crate) fn available_at(pod: &Pod, min_ready_seconds: i32) -> Option<Timestamp> {
    let ready = pod_condition(pod, "Ready").filter(|c| c.status == "True")?;
    if min_ready_seconds <= 0 {
        return None;
    }
    let since = ready.last_transition_time.as_ref()?;
    Some(plus_seconds(&since.0, i64::from(min_ready_seconds)))
}

/// The node's Ready condition status (`True`, `False`, `Unknown`), if posted.
pub(crate) fn node_ready(node: &Node) -> Option<&str> {
    node.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| c.status.as_str())
}

/// The node's taints.
pub(crate) fn taints(node: &Node) -> &[Taint] {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_deref())
        .unwrap_or_default()
}

/// The pod's tolerations.
pub(crate) fn tolerations(pod: &Pod) -> &[Toleration] {
    pod.spec
        .as_ref()
        .and_then(|s| s.tolerations.as_deref())
        .unwrap_or_default()
}

/// Whether `toleration` tolerates `taint` (`Toleration.ToleratesTaint`).
pub(crate) fn tolerates(toleration: &Toleration, taint: &Taint) -> bool {
    if let Some(effect) = toleration.effect.as_deref().filter(|e| !e.is_empty())
        && effect != taint.effect
    {
        return false;
    }
    if let Some(key) = toleration.key.as_deref().filter(|k| !k.is_empty())
        && key != taint.key
    {
        return false;
    }
    match toleration.operator.as_deref().unwrap_or_default() {
        "" | "Equal" => {
            toleration.value.as_deref().unwrap_or_default()
                == taint.value.as_deref().unwrap_or_default()
        }
        "Exists" => true,
        _ => false,
    }
}

/// The first of `taints` with one of `effects` that none of `tolerations` tolerates.
pub(crate) fn untolerated<'a>(
    taints: &'a [Taint],
    tolerations: &[Toleration],
    effects: &[&str],
) -> Option<&'a Taint> {
    taints.iter().find(|taint| {
        effects.contains(&taint.effect.as_str()) && !tolerations.iter().any(|t| tolerates(t, taint))
    })
}

/// The message of a failed request, as the API server gave it.
pub(crate) fn api_message(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) => status.message.clone(),
        other => other.to_string(),
    }
}

/// Whether a `metav1.LabelSelector` selects `labels`. An empty or missing selector selects
/// nothing here (controllers refuse to act on one).
pub(crate) fn selects(selector: Option<&LabelSelector>, labels: &BTreeMap<String, String>) -> bool {
    let Some(selector) = selector else {
        return false;
    };
    let match_labels = selector.match_labels.as_ref();
    let expressions = selector.match_expressions.as_deref().unwrap_or_default();
    if match_labels.is_none_or(BTreeMap::is_empty) && expressions.is_empty() {
        return false;
    }
    if let Some(m) = match_labels
        && m.iter().any(|(k, v)| labels.get(k) != Some(v))
    {
        return false;
    }
    expressions.iter().all(|e| {
        let values = e.values.as_deref().unwrap_or_default();
        let value = labels.get(&e.key);
        match e.operator.as_str() {
            "In" => value.is_some_and(|v| values.contains(v)),
            "NotIn" => value.is_none_or(|v| !values.contains(v)),
            "Exists" => value.is_some(),
            "DoesNotExist" => value.is_none(),
            _ => false,
        }
    })
}

/// Whether a node selector requirement holds for a value (`None` when absent).
fn requirement_holds(r: &NodeSelectorRequirement, value: Option<&String>) -> bool {
    let values = r.values.as_deref().unwrap_or_default();
    let number = |s: &str| s.parse::<i64>().ok();
    match r.operator.as_str() {
        "In" => value.is_some_and(|v| values.contains(v)),
        "NotIn" => value.is_none_or(|v| !values.contains(v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" | "Lt" => {
            let (Some(v), Some(bound)) = (
                value.and_then(|v| number(v)),
                values.first().and_then(|b| number(b)),
            ) else {
                return false;
            };
            if r.operator == "Gt" {
                v > bound
            } else {
                v < bound
            }
        }
        _ => false,
    }
}

/// Whether a node matches one term of required node affinity.
pub(crate) fn term_matches(term: &NodeSelectorTerm, node: &Node) -> bool {
    let empty = BTreeMap::new();
    let labels = node.metadata.labels.as_ref().unwrap_or(&empty);
    let exprs = term.match_expressions.as_deref().unwrap_or_default();
    let fields = term.match_fields.as_deref().unwrap_or_default();
    if exprs.is_empty() && fields.is_empty() {
        return false;
    }
    let name = node.metadata.name.clone().unwrap_or_default();
    exprs
        .iter()
        .all(|r| requirement_holds(r, labels.get(&r.key)))
        && fields
            .iter()
            .all(|r| r.key == "metadata.name" && requirement_holds(r, Some(&name)))
}

/// FNV-1a, 32 bits.
pub(crate) fn fnv32a(bytes: &[u8]) -> u32 {
    let mut hash: u32 = 0x811c_9dc5;
    for b in bytes {
        hash ^= u32::from(*b);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    hash
}

/// JSON with object keys sorted at every level (a stable input for hashes).
pub(crate) fn canonical_json(value: &Value) -> String {
    fn write(value: &Value, out: &mut String) {
        match value {
            Value::Object(map) => {
                let mut keys: Vec<&String> = map.keys().collect();
                keys.sort();
                out.push('{');
                for (i, k) in keys.into_iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(&Value::String(k.clone()).to_string());
                    out.push(':');
                    write(&map[k], out);
                }
                out.push('}');
            }
            Value::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write(item, out);
                }
                out.push(']');
            }
            other => out.push_str(&other.to_string()),
        }
    }
    let mut out = String::new();
    write(value, &mut out);
    out
}

/// `value` without null members, at every level (what Go's `omitempty` leaves out).
pub(crate) fn without_nulls(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), without_nulls(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(without_nulls).collect()),
        other => other.clone(),
    }
}

/// The characters `rand.SafeEncodeString` maps to (no vowels, no confusable digits).
const SAFE_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// `rand.SafeEncodeString`: each byte mapped into [`SAFE_ALPHABET`].
pub(crate) fn safe_encode(s: &str) -> String {
    s.bytes()
        .map(|b| SAFE_ALPHABET[usize::from(b) % SAFE_ALPHABET.len()] as char)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn taint(key: &str, value: Option<&str>, effect: &str) -> Taint {
        Taint {
            key: key.into(),
            value: value.map(Into::into),
            effect: effect.into(),
            time_added: None,
        }
    }

    #[test]
    fn exists_tolerates_any_value_and_equal_needs_the_value() {
        let t: Toleration = serde_json::from_value(
            json!({"key": "k", "operator": "Exists", "effect": "NoExecute"}),
        )
        .unwrap();
        assert!(tolerates(&t, &taint("k", Some("v"), "NoExecute")));
        assert!(!tolerates(&t, &taint("k", None, "NoSchedule")));
        let t: Toleration = serde_json::from_value(json!({"key": "k", "value": "v"})).unwrap();
        assert!(tolerates(&t, &taint("k", Some("v"), "NoSchedule")));
        assert!(!tolerates(&t, &taint("k", Some("w"), "NoSchedule")));
    }

    #[test]
    fn an_empty_selector_selects_nothing_and_expressions_combine() {
        let labels: BTreeMap<String, String> =
            [("app".to_string(), "a".to_string())].into_iter().collect();
        assert!(!selects(Some(&LabelSelector::default()), &labels));
        let sel: LabelSelector = serde_json::from_value(json!({
            "matchLabels": {"app": "a"},
            "matchExpressions": [{"key": "tier", "operator": "DoesNotExist"}]
        }))
        .unwrap();
        assert!(selects(Some(&sel), &labels));
    }

    #[test]
    fn canonical_json_sorts_keys_at_every_level() {
        let v = json!({"b": 1, "a": {"d": [2, {"f": 1, "e": 0}], "c": null}});
        assert_eq!(
            canonical_json(&v),
            r#"{"a":{"c":null,"d":[2,{"e":0,"f":1}]},"b":1}"#
        );
    }

    #[test]
    fn safe_encoding_uses_the_kubernetes_alphabet() {
        // Digits become the characters of real pod-template hashes such as "5d59d67564".
        assert_eq!(safe_encode("0123456789"), "456789bcdf");
    }
}

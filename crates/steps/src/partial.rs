//! Partial objects: whether a live object matches the fragment a feature states, and where
//! it does not, as the object steps ([`crate::steps::objects`]) judge it.
//!
//! # Rules
//! - **Maps** match when every key of the fragment is in the object and its value matches;
//!   keys the fragment does not name are not looked at.
//! - **`null`** in the fragment matches a key that is absent or null: it states that a
//!   field is *not* set (`deletionTimestamp: null`).
//! - **Arrays** match when the object's array has as many elements as the fragment's, and
//!   each element matches the fragment's element at the same index (partially, by these
//!   rules): order counts and nothing is left over. To state something about one element
//!   of a list whose order is not fixed (conditions, owners, Events), use the step made for
//!   it rather than an array.
//! - **Scalars** match when equal: strings to strings, booleans to booleans, numbers by
//!   value (`1` matches `1.0`); a string never matches a number (`"3"` is not `3`), as the
//!   API server keeps them apart.
//!
//! These are the rules of Chainsaw's and KUTTL's assertions for maps, arrays and scalars,
//! without their expression languages.

use serde_json::Value;

/// Where the object differs from the fragment: one line per difference, each naming the
/// field (`.spec.template.spec.containers[0].image`), what was expected and what was found.
/// Empty when the object matches.
pub fn mismatches(fragment: &Value, object: &Value) -> Vec<String> {
    let mut found = Vec::new();
    compare(fragment, Some(object), &mut String::new(), &mut found);
    found
}

fn compare(expected: &Value, actual: Option<&Value>, path: &mut String, found: &mut Vec<String>) {
    let at = |path: &str| {
        if path.is_empty() {
            ".".to_string()
        } else {
            path.to_string()
        }
    };
    match (expected, actual) {
        (Value::Null, None | Some(Value::Null)) => {}
        (Value::Null, Some(other)) => found.push(format!(
            "{}: expected no value, found {}",
            at(path),
            short(other)
        )),
        (_, None) => found.push(format!(
            "{}: missing, expected {}",
            at(path),
            short(expected)
        )),
        (Value::Object(fields), Some(Value::Object(object))) => {
            for (key, value) in fields {
                let len = path.len();
                path.push('.');
                path.push_str(key);
                compare(value, object.get(key), path, found);
                path.truncate(len);
            }
        }
        (Value::Array(items), Some(Value::Array(elements))) => {
            if items.len() != elements.len() {
                found.push(format!(
                    "{}: expected {} element(s), found {}: {}",
                    at(path),
                    items.len(),
                    elements.len(),
                    short(actual.unwrap_or(&Value::Null))
                ));
                return;
            }
            for (i, (item, element)) in items.iter().zip(elements).enumerate() {
                let len = path.len();
                path.push_str(&format!("[{i}]"));
                compare(item, Some(element), path, found);
                path.truncate(len);
            }
        }
        (Value::Number(a), Some(Value::Number(b))) => {
            let equal = match (a.as_i64(), b.as_i64(), a.as_u64(), b.as_u64()) {
                (Some(x), Some(y), _, _) => x == y,
                (_, _, Some(x), Some(y)) => x == y,
                _ => a.as_f64() == b.as_f64(),
            };
            if !equal {
                found.push(format!("{}: expected {a}, found {b}", at(path)));
            }
        }
        (expected, Some(actual)) => {
            if expected != actual {
                found.push(format!(
                    "{}: expected {}, found {}",
                    at(path),
                    short(expected),
                    short(actual)
                ));
            }
        }
    }
}

/// A value as one line, cut at 200 characters.
fn short(value: &Value) -> String {
    let text = value.to_string();
    if text.chars().count() > 200 {
        format!("{}…", text.chars().take(200).collect::<String>())
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment() -> Value {
        json!({
            "metadata": {"name": "web", "labels": {"app": "web", "tier": "front"}},
            "spec": {
                "replicas": 3,
                "template": {"spec": {"containers": [
                    {"name": "web", "image": "nginx:1", "ports": [{"containerPort": 80}]},
                    {"name": "sidecar", "image": "envoy:2"}
                ]}}
            },
            "status": {"readyReplicas": 3.0}
        })
    }

    #[test]
    fn a_fragment_matches_whatever_keys_it_leaves_out() {
        let fragment = json!({"metadata": {"labels": {"app": "web"}}, "spec": {"replicas": 3}});
        assert_eq!(mismatches(&fragment, &deployment()), Vec::<String>::new());
    }

    #[test]
    fn each_difference_names_its_field_what_was_expected_and_what_was_found() {
        let fragment = json!({
            "metadata": {"labels": {"app": "api", "owner": "me"}},
            "spec": {"replicas": "3"}
        });
        assert_eq!(
            mismatches(&fragment, &deployment()),
            vec![
                ".metadata.labels.app: expected \"api\", found \"web\"",
                ".metadata.labels.owner: missing, expected \"me\"",
                ".spec.replicas: expected \"3\", found 3",
            ]
        );
    }

    #[test]
    fn arrays_match_element_by_element_in_order_and_in_length() {
        let in_order = json!({"spec": {"template": {"spec": {"containers": [
            {"name": "web", "ports": [{"containerPort": 80}]},
            {"image": "envoy:2"}
        ]}}}});
        assert!(mismatches(&in_order, &deployment()).is_empty());
        let swapped = json!({"spec": {"template": {"spec": {"containers": [
            {"name": "sidecar"}, {"name": "web"}
        ]}}}});
        assert_eq!(
            mismatches(&swapped, &deployment()),
            vec![
                ".spec.template.spec.containers[0].name: expected \"sidecar\", found \"web\"",
                ".spec.template.spec.containers[1].name: expected \"web\", found \"sidecar\"",
            ]
        );
        let fewer = json!({"spec": {"template": {"spec": {"containers": [{"name": "web"}]}}}});
        let e = mismatches(&fewer, &deployment());
        assert_eq!(e.len(), 1);
        assert!(
            e[0].starts_with(".spec.template.spec.containers: expected 1 element(s), found 2"),
            "{e:?}"
        );
    }

    #[test]
    fn null_states_that_a_field_is_not_set() {
        let unset = json!({"metadata": {"deletionTimestamp": null}});
        assert!(mismatches(&unset, &deployment()).is_empty());
        let set = json!({"metadata": {"name": null}});
        assert_eq!(
            mismatches(&set, &deployment()),
            vec![".metadata.name: expected no value, found \"web\""]
        );
    }

    #[test]
    fn numbers_match_by_value_whatever_their_notation() {
        let fragment = json!({"spec": {"replicas": 3.0}, "status": {"readyReplicas": 3}});
        assert!(mismatches(&fragment, &deployment()).is_empty());
        let fragment = json!({"spec": {"replicas": 4}});
        assert_eq!(
            mismatches(&fragment, &deployment()),
            vec![".spec.replicas: expected 4, found 3"]
        );
    }

    #[test]
    fn a_map_where_a_scalar_is_expected_is_a_difference_not_a_panic() {
        let fragment = json!({"spec": {"replicas": {"min": 1}}, "metadata": "x"});
        let e = mismatches(&fragment, &deployment());
        assert_eq!(e.len(), 2, "{e:?}");
        assert!(
            e.iter()
                .any(|m| m == ".spec.replicas: expected {\"min\":1}, found 3"),
            "{e:?}"
        );
        assert!(
            e.iter()
                .any(|m| m.starts_with(".metadata: expected \"x\", found {")),
            "{e:?}"
        );
    }
}

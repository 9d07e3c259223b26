//! The order of an answer's JSON keys, as the bytes came: kube-apiserver writes a built-in
//! object in its Go struct's declaration order (kind and apiVersion first), maps and custom
//! resources with sorted keys, and clients that compare messages carrying byte offsets see the
//! difference. Each answer is recorded with the paths of its keys in document order (each path
//! once, where it first occurs, list items as `[]`), next to its normalized body.

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::{Value, json};

use super::{
    Answer, Interaction, JSON, MERGE, NS, Target, configmap, header_of, mask, normalize,
    parse_body, raw_get,
};

/// Where the ordered interactions' ConfigMaps live.
fn configmaps() -> String {
    format!("/api/v1/namespaces/{NS}/configmaps")
}

/// What the answer's record holds besides its key order.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Body {
    /// The normalized body too.
    Compared,
    /// The keys only: the values differ between any two clusters (addresses, the set of
    /// served groups), the order of the keys does not.
    KeysOnly,
}

/// Sends a request as the admin with `accept`, records its status, its `Warning` header, its
/// key paths in document order and (with [`Body::Compared`]) its body; returns the body's text.
pub(super) async fn ordered(
    t: &Target,
    method: &str,
    path: &str,
    content_type: &str,
    accept: &str,
    body: Value,
    keep: Body,
) -> String {
    let (code, response, text) = super::exchange(t, method, path, content_type, accept, body).await;
    let warning = header_of(&response, "warning");
    // encoding/json writes `<`, `>` and `&` as `\u003c`, `\u003e` and `\u0026`.
    let literal = text.contains(['<', '>', '&']);
    let mut record = json!({"warning": warning, "keys": key_paths(&text),
        "literal <, > or &": literal});
    if keep == Body::Compared {
        record["body"] = normalize(parse_body(text.clone()));
    }
    t.record(Answer {
        asked: format!("{method} {path} with Accept: {accept}"),
        code: i64::from(code),
        body: record,
    });
    text
}

/// The key paths of a JSON text (or of each line of a watch stream, prefixed with its line
/// number) in document order, each once; keys are masked as values are (managedFields keys
/// carry uids).
pub(super) fn key_paths(text: &str) -> Vec<String> {
    let mut paths = Vec::new();
    let documents: Vec<&str> = if serde_json::from_str::<IgnoredAny>(text).is_ok() {
        vec![text]
    } else {
        text.lines().filter(|l| !l.trim().is_empty()).collect()
    };
    let several = documents.len() > 1;
    for (i, document) in documents.into_iter().enumerate() {
        let prefix = if several {
            format!("{i}:")
        } else {
            String::new()
        };
        let mut deserializer = serde_json::Deserializer::from_str(document);
        if (Paths {
            prefix,
            out: &mut paths,
        })
        .deserialize(&mut deserializer)
        .is_err()
        {
            paths.push(format!("not json: {}", mask(document)));
        }
    }
    let mut seen = std::collections::HashSet::new();
    paths.retain(|p| seen.insert(p.clone()));
    paths
}

/// Collects the key paths under `prefix` while deserializing a value.
struct Paths<'a> {
    prefix: String,
    out: &'a mut Vec<String>,
}

impl<'de> DeserializeSeed<'de> for Paths<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Paths<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<String>()? {
            let path = format!("{}.{}", self.prefix, mask(&key));
            self.out.push(path.clone());
            map.next_value_seed(Paths {
                prefix: path,
                out: self.out,
            })?;
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let prefix = format!("{}[]", self.prefix);
        while seq
            .next_element_seed(Paths {
                prefix: prefix.clone(),
                out: self.out,
            })?
            .is_some()
        {}
        Ok(())
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }

    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }

    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }

    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }

    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }
}

/// The interactions that compare key order.
pub(super) fn interactions() -> Vec<Interaction> {
    vec![
        interaction!(
            "field order: a ConfigMap's create, get, update, patch, list and errors",
            |t| {
                let path = configmaps();
                let one = format!("{path}/ordered");
                // An owner that exists, or the garbage collector deletes the object.
                super::raw_create(t, &path, &configmap("order-owner", json!({}))).await;
                let owner = raw_get(t, &format!("{path}/order-owner")).await;
                let mut object = configmap("ordered", json!({"zeta": "1", "alpha": "2"}));
                object["metadata"]["labels"] = json!({"b": "1", "a": "2"});
                object["metadata"]["annotations"] = json!({"y": "<&>", "x": "\u{2028}"});
                object["metadata"]["ownerReferences"] = json!([{"uid": owner["metadata"]["uid"],
                    "name": "order-owner", "kind": "ConfigMap", "controller": true,
                    "blockOwnerDeletion": false, "apiVersion": "v1"}]);
                object["metadata"]["finalizers"] = json!(["example.com/keep"]);
                ordered(t, "POST", &path, JSON, JSON, object, Body::Compared).await;
                ordered(t, "GET", &one, JSON, JSON, Value::Null, Body::Compared).await;
                let mut live = raw_get(t, &one).await;
                live["data"]["beta"] = json!("3");
                ordered(t, "PUT", &one, JSON, JSON, live, Body::Compared).await;
                let patch = json!({"metadata": {"finalizers": null}, "data": {"gamma": "4"}});
                ordered(t, "PATCH", &one, MERGE, JSON, patch, Body::Compared).await;
                let list = format!("{path}?fieldSelector=metadata.name%3Dordered");
                ordered(t, "GET", &list, JSON, JSON, Value::Null, Body::Compared).await;
                let none = format!("{path}?fieldSelector=metadata.name%3Dnone");
                ordered(
                    t,
                    "GET",
                    &none,
                    JSON,
                    super::PARTIAL_LIST,
                    Value::Null,
                    Body::Compared,
                )
                .await;
                let missing = format!("{path}/missing");
                ordered(t, "GET", &missing, JSON, JSON, Value::Null, Body::Compared).await;
                let invalid = configmap("Not<Valid>", json!({"k": "v"}));
                ordered(t, "POST", &path, JSON, JSON, invalid, Body::Compared).await;
                let watch = format!("{list}&watch=1&timeoutSeconds=1");
                ordered(t, "GET", &watch, JSON, JSON, Value::Null, Body::Compared).await;
                ordered(
                    t,
                    "GET",
                    &one,
                    JSON,
                    super::PARTIAL,
                    Value::Null,
                    Body::Compared,
                )
                .await;
                ordered(
                    t,
                    "GET",
                    &list,
                    JSON,
                    super::PARTIAL_LIST,
                    Value::Null,
                    Body::Compared,
                )
                .await;
                ordered(t, "DELETE", &one, JSON, JSON, Value::Null, Body::Compared).await;
            }
        ),
        interaction!(
            "field order: a Pod, a Lease, a Namespace and a Deployment",
            |t| {
                let pods = format!("/api/v1/namespaces/{NS}/pods");
                let pod = json!({"spec": {"restartPolicy": "Never", "containers": [{
                    "volumeMounts": [{"mountPath": "/data", "name": "data"}],
                    "resources": {"requests": {"memory": "64Mi", "cpu": "100m"}},
                    "ports": [{"protocol": "TCP", "containerPort": 8080, "name": "http"}],
                    "env": [{"value": "1", "name": "A"}],
                    "image": "example/app:1", "name": "main"}],
                    "volumes": [{"emptyDir": {}, "name": "data"}]},
                "metadata": {"labels": {"z": "1", "a": "2"}, "name": "ordered"},
                "kind": "Pod", "apiVersion": "v1"});
                ordered(t, "POST", &pods, JSON, JSON, pod, Body::Compared).await;
                // Unscheduled, so gone at once (unrecorded: the simulated scheduler's PodScheduled
                // condition has no lastProbeTime and observedGeneration yet).
                let one = format!("{pods}/ordered");
                super::support::raw(&t.admin, "DELETE", &one, JSON, Vec::new()).await;
                let leases = format!("/apis/coordination.k8s.io/v1/namespaces/{NS}/leases");
                let lease = json!({"spec": {"leaseDurationSeconds": 15, "holderIdentity": "me",
                "renewTime": "2026-01-01T00:00:00.000000Z"},
                "metadata": {"namespace": NS, "name": "ordered"},
                "kind": "Lease", "apiVersion": "coordination.k8s.io/v1"});
                ordered(t, "POST", &leases, JSON, JSON, lease, Body::Compared).await;
                let namespace = format!("/api/v1/namespaces/{NS}");
                ordered(
                    t,
                    "GET",
                    &namespace,
                    JSON,
                    JSON,
                    Value::Null,
                    Body::Compared,
                )
                .await;
                let deployments = format!("/apis/apps/v1/namespaces/{NS}/deployments");
                let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "ordered", "labels": {"app": "ordered"}},
                "spec": {"selector": {"matchLabels": {"app": "ordered"}}, "replicas": 0,
                    "template": {"metadata": {"labels": {"app": "ordered"}},
                        "spec": {"containers": [{"name": "c", "image": "busybox",
                            "ports": [{"containerPort": 80}],
                            "env": [{"name": "A", "value": "1"}]}],
                            "volumes": [{"name": "v", "configMap": {"name": "cm"}}]}}}});
                ordered(
                    t,
                    "POST",
                    &deployments,
                    JSON,
                    JSON,
                    deployment,
                    Body::Compared,
                )
                .await;
            }
        ),
        interaction!("field order: a custom resource and its list", |t| {
            let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                "metadata": {"name": "gadgets.order.example.com"},
                "spec": {"group": "order.example.com", "scope": "Namespaced",
                    "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget",
                        "listKind": "GadgetList"},
                    "versions": [{"name": "v1", "served": true, "storage": true,
                        "schema": {"openAPIV3Schema": {"type": "object",
                            "x-kubernetes-preserve-unknown-fields": true}}}]}});
            super::raw_create(t, super::CRDS, &crd).await;
            let gadgets = format!("/apis/order.example.com/v1/namespaces/{NS}/gadgets");
            super::wait_until(t, &gadgets, "the CRD's resource to be served", |code, _| {
                code == 200
            })
            .await;
            let gadget = json!({"kind": "Gadget", "apiVersion": "order.example.com/v1",
                "metadata": {"name": "g", "labels": {"b": "1", "a": "2"}},
                "zeta": 1, "spec": {"y": 1, "b": 2}, "alpha": "x",
                // Go writes a float64 without a needless fraction, and 1e21 as 1e+21.
                "floats": [5.0, 1.5, 1e16, 1e21, 1e-7]});
            ordered(t, "POST", &gadgets, JSON, JSON, gadget, Body::Compared).await;
            ordered(t, "GET", &gadgets, JSON, JSON, Value::Null, Body::Compared).await;
        }),
        interaction!("field order: discovery documents", |t| {
            let get = |path: &'static str, keep: Body| async move {
                ordered(t, "GET", path, JSON, JSON, Value::Null, keep).await;
            };
            get("/api", Body::KeysOnly).await;
            get("/apis", Body::KeysOnly).await;
            get("/apis/coordination.k8s.io", Body::Compared).await;
            get("/apis/coordination.k8s.io/v1", Body::Compared).await;
            get("/api/v1", Body::KeysOnly).await;
            ordered(
                t,
                "GET",
                "/apis",
                JSON,
                super::AGGREGATED,
                Value::Null,
                Body::KeysOnly,
            )
            .await;
        }),
    ]
}

#[cfg(test)]
mod tests {
    use super::key_paths;

    #[test]
    fn key_paths_follow_the_document_and_name_each_path_once() {
        let text = r#"{"kind":"X","items":[{"b":1,"a":{"c":2}},{"b":3,"z":4}],"apiVersion":"v1"}"#;
        assert_eq!(
            key_paths(text),
            [
                ".kind",
                ".items",
                ".items[].b",
                ".items[].a",
                ".items[].a.c",
                ".items[].z",
                ".apiVersion"
            ]
        );
    }

    #[test]
    fn a_watch_stream_has_the_paths_of_each_line() {
        let text = "{\"type\":\"ADDED\",\"object\":{\"kind\":\"A\"}}\n{\"type\":\"DELETED\"}\n";
        assert_eq!(
            key_paths(text),
            ["0:.type", "0:.object", "0:.object.kind", "1:.type"]
        );
    }
}

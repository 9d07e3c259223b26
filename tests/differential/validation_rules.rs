//! CRD validation rules (`x-kubernetes-validations`) judged by kube-apiserver: CRDs refused
//! for a rule that does not compile or is badly stated, and a custom resource written against
//! rules of every kind — at the root, on an object, on a map's values and a `map` list's items;
//! with messages, message expressions, reasons and field paths; on durations, timestamps and
//! escaped property names; transition rules (`oldSelf`, `optionalOldSelf`) on updates;
//! an evaluation error; rules kept from running by a schema error; and a rule added to the
//! CRD, and a schema `maximum`, that an existing object fails, which ratchet: an update that
//! leaves the failing value as it was is admitted (with a warning for the rule).
//!
//! kube-apiserver reads a CRD through an informer: a changed rule is in effect once a dry-run
//! create it refuses is refused.

use serde_json::{Value, json};

use super::{Answer, Interaction, JSON, MERGE, NS, Target, exchange, normalize, poll_until};

const GROUP: &str = "rules.opconform.test";

fn gizmos() -> String {
    format!("/apis/{GROUP}/v1/namespaces/{NS}/gizmos")
}

fn gizmo_path(name: &str) -> String {
    format!("{}/{name}", gizmos())
}

fn gizmo(name: &str, spec: Value) -> Value {
    json!({"apiVersion": format!("{GROUP}/v1"), "kind": "Gizmo",
        "metadata": {"name": name}, "spec": spec})
}

/// Sends a request and records its status and body.
async fn send(t: &Target, method: &str, path: &str, content_type: &str, body: Value) -> u16 {
    let asked = format!("{method} {path} {}", body["metadata"]["name"]);
    let (code, response, text) = exchange(t, method, path, content_type, JSON, body).await;
    let parsed = super::parse_body(text);
    let answer = if code < 300 {
        parsed["spec"].clone()
    } else {
        parsed
    };
    t.record(Answer {
        asked,
        code: i64::from(code),
        body: normalize(json!({"answer": answer, "warnings": super::warnings(&response)})),
    });
    code
}

/// The CRD of gizmos, with `extra` rules on `spec` after the ones every version has (and,
/// with any, a `maximum` of 10 `maxReplicas`).
fn crd(extra: &[Value]) -> Value {
    let mut spec_rules = vec![
        json!({"rule": "self.minReplicas <= self.maxReplicas",
               "message": "minReplicas must not exceed maxReplicas"}),
        json!({"rule": "self.maxReplicas < 100",
               "messageExpression": "self.mode == 'fast' ? 'a fast gizmo has too many replicas' : 'a slow gizmo has too many replicas'"}),
        json!({"rule": "self.mode == oldSelf.mode", "message": "mode is immutable",
               "reason": "FieldValueForbidden"}),
        json!({"rule": "self.maxReplicas != 13", "fieldPath": ".maxReplicas",
               "reason": "FieldValueRequired", "message": "thirteen is not a replica count"}),
        json!({"rule": "!has(self.lucky) || self.lucky != 7", "fieldPath": ".lucky"}),
        json!({"rule": "oldSelf.hasValue() ? self.generationHint >= oldSelf.value().generationHint : self.generationHint == 1",
               "optionalOldSelf": true, "message": "generationHint starts at 1 and never goes down"}),
    ];
    spec_rules.extend(extra.iter().cloned());
    let ports = json!({"type": "array", "x-kubernetes-list-type": "map", "maxItems": 8,
        "x-kubernetes-list-map-keys": ["name"],
        "items": {"type": "object", "required": ["name"],
            "x-kubernetes-validations": [
                {"rule": "self.port == oldSelf.port", "message": "a port's number is immutable"},
                {"rule": "self.name != 'eval' || self.port > self.missing"}],
            "properties": {"name": {"type": "string", "maxLength": 16}, "port": {"type": "integer"},
                           "missing": {"type": "integer"}}}});
    let names = json!({"type": "object",
        "x-kubernetes-validations": [
            {"rule": "self.host__dash__name != self.__namespace__",
             "message": "host name and namespace differ"}],
        "properties": {"host-name": {"type": "string", "maxLength": 16},
                       "namespace": {"type": "string", "maxLength": 16}}});
    let properties = json!({
        "minReplicas": {"type": "integer"},
        "maxReplicas": {"type": "integer"},
        "mode": {"type": "string", "enum": ["fast", "slow"], "maxLength": 4},
        "lucky": {"type": "integer"},
        "generationHint": {"type": "integer"},
        "weight": {"type": "number", "x-kubernetes-validations": [{"rule": "self < 2.5"}]},
        "timeout": {"type": "string", "format": "duration", "maxLength": 16,
            "x-kubernetes-validations": [
                {"rule": "self <= duration('1h')", "message": "at most an hour"}]},
        "notBefore": {"type": "string", "format": "date-time", "maxLength": 32,
            "x-kubernetes-validations": [{"rule": "self > timestamp('2020-01-01T00:00:00Z')"}]},
        "limits": {"type": "object", "maxProperties": 4,
            "additionalProperties": {"type": "string", "maxLength": 16,
            "x-kubernetes-validations": [{"rule": "size(self) <= 5"}]}},
        "port": {"x-kubernetes-int-or-string": true,
            "x-kubernetes-validations": [
                {"rule": "type(self) == string || self > 0", "message": "a port number is positive"}]},
        "ports": ports,
        "names": names});
    let mut properties = properties;
    if !extra.is_empty() {
        // A stricter schema too, which existing objects may fail.
        properties["maxReplicas"]["maximum"] = json!(10);
    }
    let schema = json!({"type": "object",
        "x-kubernetes-validations": [
            {"rule": "self.metadata.name.startsWith('g')", "message": "a gizmo's name starts with g"}],
        "properties": {"spec": {"type": "object",
            "x-kubernetes-validations": spec_rules,
            "required": ["minReplicas", "maxReplicas", "mode", "generationHint"],
            "properties": properties}}});
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("gizmos.{GROUP}")},
        "spec": {"group": GROUP, "scope": "Namespaced",
            "names": {"plural": "gizmos", "singular": "gizmo", "kind": "Gizmo"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": schema}}]}})
}

/// A CRD like [`crd`]'s but named `name` and with one `rule` on `spec`: refused.
fn refused_crd(name: &str, rule: Value) -> Value {
    let mut refused = crd(&[]);
    refused["metadata"]["name"] = json!(format!("{name}.{GROUP}"));
    refused["spec"]["names"] = json!({"plural": name, "kind": "Refused"});
    refused["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["x-kubernetes-validations"] =
        json!([rule]);
    refused
}

fn valid_spec() -> Value {
    json!({"minReplicas": 1, "maxReplicas": 3, "mode": "fast", "generationHint": 1,
           "weight": 1.5, "timeout": "30m", "notBefore": "2024-05-01T10:00:00Z",
           "limits": {"cpu": "500m"}, "port": "http", "names": {"host-name": "a", "namespace": "b"},
           "ports": [{"name": "http", "port": 80}, {"name": "https", "port": 443}]})
}

/// Makes the gizmos CRD with `extra` rules (created, or replaced), and waits until a dry-run
/// create of `refused_spec` is refused: the rules are then in effect.
async fn define(t: &Target, extra: &[Value], refused_spec: Value) {
    let crds = super::CRDS;
    let path = format!("{crds}/gizmos.{GROUP}");
    let (code, _, text) = exchange(t, "GET", &path, JSON, JSON, Value::Null).await;
    let mut body = crd(extra);
    let (method, target) = if code == 200 {
        body["metadata"]["resourceVersion"] =
            super::parse_body(text)["metadata"]["resourceVersion"].clone();
        ("PUT", path)
    } else {
        ("POST", crds.to_string())
    };
    let (code, _, text) = exchange(t, method, &target, JSON, JSON, body).await;
    assert!(
        code < 300,
        "{}: {method} the gizmos CRD: {code} {text}",
        t.name
    );
    let probe = gizmo("gprobe", refused_spec);
    let dry_run = format!("{}?dryRun=All", gizmos());
    poll_until(
        t,
        "the gizmos CRD's rules in effect",
        || exchange(t, "POST", &dry_run, JSON, JSON, probe.clone()),
        |(code, _, _)| *code == 422,
    )
    .await;
}

pub(super) fn interactions() -> Vec<Interaction> {
    vec![
        interaction!(
            "CRD validation rules refused when the CRD is written",
            |t| {
                for (name, rule) in [
                    ("syntaxes", json!({"rule": "self.minReplicas >"})),
                    ("variables", json!({"rule": "object.spec.minReplicas > 0"})),
                    ("emptyrules", json!({"rule": "  "})),
                    (
                        "reasons",
                        json!({"rule": "self.minReplicas > 0", "reason": "FieldValueTooLong"}),
                    ),
                    (
                        "fieldpaths",
                        json!({"rule": "self.minReplicas > 0", "fieldPath": ".nowhere"}),
                    ),
                    (
                        "messages",
                        json!({"rule": "self.minReplicas > 0", "message": "two\nlines"}),
                    ),
                    (
                        "multilines",
                        json!({"rule": "self.minReplicas > 0 &&\nself.maxReplicas > 0"}),
                    ),
                    (
                        "fields",
                        json!({"rule": "self.nope > 0 || has(self.names.other) || self.limits.any > ''"}),
                    ),
                    (
                        "messagefields",
                        json!({"rule": "self.minReplicas > 0", "messageExpression": "self.names.nope"}),
                    ),
                    (
                        "blanks",
                        json!({"rule": "self.minReplicas > 0", "message": "  ", "fieldPath": " "}),
                    ),
                    (
                        "optionals",
                        json!({"rule": "self.minReplicas > 0", "optionalOldSelf": true}),
                    ),
                    (
                        "expressions",
                        json!({"rule": "self.minReplicas > 0", "messageExpression": "'a' +"}),
                    ),
                ] {
                    send(t, "POST", super::CRDS, JSON, refused_crd(name, rule)).await;
                }
                // A transition rule on the items of a list that is no map, and a CRD whose two
                // versions differ (checked per version).
                let mut atomic = refused_crd("atomics", json!({"rule": "self.minReplicas > 0"}));
                atomic["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
                    ["properties"]["tags"] = json!({"type": "array", "maxItems": 4,
                        "items": {"type": "string", "maxLength": 8,
                            "x-kubernetes-validations": [{"rule": "self == oldSelf"}]}});
                send(t, "POST", super::CRDS, JSON, atomic).await;
                let mut versioned =
                    refused_crd("versioneds", json!({"rule": "self.minReplicas >"}));
                let mut second = versioned["spec"]["versions"][0].clone();
                second["name"] = json!("v2");
                second["storage"] = json!(false);
                second["schema"]["openAPIV3Schema"]["properties"]["spec"]["x-kubernetes-validations"] =
                    json!([{"rule": "self.maxReplicas >"}]);
                versioned["spec"]["versions"] = json!([versioned["spec"]["versions"][0], second]);
                send(t, "POST", super::CRDS, JSON, versioned).await;
            }
        ),
        interaction!(
            "CRD validation rules on creates and updates of custom resources",
            |t| {
                let mut refused = valid_spec();
                refused["minReplicas"] = json!(5);
                define(t, &[], refused).await;
                let list = gizmos();
                send(t, "POST", &list, JSON, gizmo("gadget", valid_spec())).await;
                for (name, change) in [
                    ("widget", json!({})),
                    ("gmin", json!({"minReplicas": 5})),
                    ("gmax", json!({"minReplicas": 200, "maxReplicas": 150})),
                    ("gthirteen", json!({"maxReplicas": 13})),
                    ("glucky", json!({"lucky": 7})),
                    ("ghint", json!({"generationHint": 2})),
                    ("gweight", json!({"weight": 3})),
                    ("gtimeout", json!({"timeout": "2h"})),
                    ("gnotbefore", json!({"notBefore": "2019-12-31T23:59:59Z"})),
                    ("glimits", json!({"limits": {"cpu": "1500m"}})),
                    (
                        "gnames",
                        json!({"names": {"host-name": "same", "namespace": "same"}}),
                    ),
                    ("geval", json!({"ports": [{"name": "eval", "port": 1}]})),
                    ("gport", json!({"port": 0})),
                    ("gportnumber", json!({"port": 8080})),
                    ("gschema", json!({"minReplicas": "one", "maxReplicas": 0})),
                ] {
                    let mut spec = valid_spec();
                    for (key, value) in change.as_object().unwrap() {
                        spec[key] = value.clone();
                    }
                    send(t, "POST", &list, JSON, gizmo(name, spec)).await;
                }
                let path = gizmo_path("gadget");
                for patch in [
                    json!({"spec": {"mode": "slow"}}),
                    json!({"spec": {"generationHint": 0}}),
                    json!({"spec": {"generationHint": 4}}),
                    json!({"spec": {"ports": [{"name": "https", "port": 443}, {"name": "http", "port": 8080}]}}),
                    json!({"spec": {"ports": [{"name": "https", "port": 443}, {"name": "http", "port": 80}, {"name": "admin", "port": 9000}]}}),
                ] {
                    send(t, "PATCH", &path, MERGE, patch).await;
                }
                let apply = gizmo("gadget", json!({"maxReplicas": 13, "mode": "fast"}));
                let applied = format!("{path}?fieldManager=differential&force=true");
                send(t, "PATCH", &applied, super::APPLY, apply).await;
            }
        ),
        interaction!(
            "CRD validation rules ratchet values an update leaves as they were",
            |t| {
                let mut refused = valid_spec();
                refused["minReplicas"] = json!(5);
                define(t, &[], refused).await;
                let mut spec = valid_spec();
                spec["maxReplicas"] = json!(50);
                send(t, "POST", &gizmos(), JSON, gizmo("gratchet", spec.clone())).await;
                let stricter = json!({"rule": "self.maxReplicas <= 10", "message": "at most ten replicas now"});
                define(t, &[stricter], spec).await;
                let path = gizmo_path("gratchet");
                for patch in [
                    json!({"metadata": {"labels": {"touched": "yes"}}}),
                    json!({"spec": {"timeout": "45m"}}),
                    json!({"spec": {"maxReplicas": 40}}),
                    json!({"spec": {"maxReplicas": 9}}),
                ] {
                    send(t, "PATCH", &path, MERGE, patch).await;
                }
            }
        ),
    ]
}

//! ResourceQuotas: the status kube-controller-manager's resource quota controller writes,
//! the ResourceQuota admission plugin's refusals (a pod that does not state what a quota
//! tracks, and creates over the limit of pods' compute, object counts, node ports and
//! storage) and its charges, and the usage given back when an object is deleted.
//! Pod updates moving a pod in or out of the `Terminating` scope, charged and refused as a
//! create is; claims counted by the `VolumeAttributesClass` scope.
//! LimitRanges: the LimitRanger plugin's defaults and annotation on a pod, created by a POST
//! or by server-side apply, and its refusals of pods and claims out of range.

use serde_json::{Value, json};

use super::{APPLY, Answer, Interaction, JSON, MERGE, normalize, parse_body, support, wait_until};

/// The namespace of these interactions.
const NAMESPACE: &str = "quota";

fn quota_path() -> String {
    format!("/api/v1/namespaces/{NAMESPACE}/resourcequotas/counts")
}

/// POSTs `object` to `path`: a refusal is recorded whole, a create by its code.
async fn create(t: &super::Target, path: &str, object: &Value) -> u16 {
    let body = serde_json::to_vec(object).unwrap();
    let (code, text) = support::raw(&t.admin, "POST", path, JSON, body).await;
    let recorded = if code == 201 {
        Value::Null
    } else {
        normalize(parse_body(text))
    };
    t.record(Answer {
        asked: format!("POST {path} {}", object["metadata"]["name"]),
        code: i64::from(code),
        body: recorded,
    });
    code
}

/// Waits until the quota's status satisfies `settled`, then records it.
async fn status_once(t: &super::Target, what: &str, settled: impl Fn(&Value) -> bool) {
    let path = quota_path();
    wait_until(t, &path, what, |code, body| {
        code == 200 && settled(&body["status"])
    })
    .await;
    let (code, text) = support::raw(&t.admin, "GET", &path, JSON, Vec::new()).await;
    t.record(Answer {
        asked: format!("GET {path}: status, {what}"),
        code: i64::from(code),
        body: normalize(parse_body(text)["status"].clone()),
    });
}

fn pod(name: &str, resources: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
           "spec": {"containers": [{"name": "main", "image": "example/app:1",
                                    "resources": resources}]}})
}

fn config_map(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}})
}

/// Sends `body` to `path` with `method` and `content_type`, recording the answer's code and,
/// when refused, its body.
async fn send_recorded(
    t: &super::Target,
    method: &str,
    path: &str,
    content_type: &str,
    body: &Value,
) -> u16 {
    let bytes = serde_json::to_vec(body).unwrap();
    let (code, text) = support::raw(&t.admin, method, path, content_type, bytes).await;
    let recorded = if (200..300).contains(&code) {
        Value::Null
    } else {
        normalize(parse_body(text))
    };
    t.record(Answer {
        asked: format!("{method} {path}"),
        code: i64::from(code),
        body: recorded,
    });
    code
}

/// Records the managed fields entries of the pod at `path` but the scheduler's (whose
/// status entry comes when it comes): what the client's create owns.
async fn record_client_fields(t: &super::Target, path: &str) {
    let fields: Vec<Value> = super::raw_get(t, path).await["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|entry| entry["manager"] != "kube-scheduler")
        .cloned()
        .collect();
    t.record(Answer {
        asked: format!("GET {path}: the client's managed fields"),
        code: 200,
        body: normalize(json!(fields)),
    });
}

/// Records the resources of each container of the pod at `path`, and its annotations.
async fn record_resources(t: &super::Target, path: &str) {
    let (code, text) = support::raw(&t.admin, "GET", path, JSON, Vec::new()).await;
    let pod = parse_body(text);
    let containers = |key: &str| -> Vec<Value> {
        pod["spec"][key]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| json!({"name": c["name"], "resources": c["resources"]}))
            .collect()
    };
    t.record(Answer {
        asked: format!("GET {path}: resources and annotations"),
        code: i64::from(code),
        body: json!({"annotations": pod["metadata"]["annotations"],
                     "containers": containers("containers"),
                     "initContainers": containers("initContainers")}),
    });
}

/// The interactions of this module, in the order they run.
pub(super) fn interactions() -> Vec<Interaction> {
    vec![
        limit_ranges(),
        terminating_scope(),
        volume_attributes_class_scope(),
        interaction!(
            "resource quotas: status, refusals over the limits, and usage given back",
            |t| {
                let namespaces = "/api/v1/namespaces";
                let ns = json!({"apiVersion": "v1", "kind": "Namespace",
                            "metadata": {"name": NAMESPACE}});
                assert_eq!(create(t, namespaces, &ns).await, 201);
                let root_ca = format!("/api/v1/namespaces/{NAMESPACE}/configmaps/kube-root-ca.crt");
                wait_until(t, &root_ca, "the root CA config map", |code, _| code == 200).await;
                let account = format!("/api/v1/namespaces/{NAMESPACE}/serviceaccounts/default");
                wait_until(t, &account, "the default account", |code, _| code == 200).await;
                let quota = json!({"apiVersion": "v1", "kind": "ResourceQuota",
                "metadata": {"name": "counts"},
                "spec": {"hard": {
                    "pods": "2", "requests.cpu": "1", "limits.memory": "1Gi",
                    "configmaps": "3", "services": "2", "services.nodeports": "1",
                    "count/leases.coordination.k8s.io": "1",
                    "persistentvolumeclaims": "2", "requests.storage": "1Gi"}}});
                let quotas = format!("/api/v1/namespaces/{NAMESPACE}/resourcequotas");
                assert_eq!(create(t, &quotas, &quota).await, 201);
                status_once(t, "computed", |s| s["used"]["configmaps"] == "1").await;

                let pods = format!("/api/v1/namespaces/{NAMESPACE}/pods");
                create(t, &pods, &pod("unstated", json!({}))).await;
                let stated = json!({"requests": {"cpu": "600m"}, "limits": {"memory": "512Mi"}});
                create(t, &pods, &pod("first", stated.clone())).await;
                create(t, &pods, &pod("second", stated)).await;
                let small = json!({"requests": {"cpu": "0.2"}, "limits": {"memory": "256Mi"}});
                create(t, &pods, &pod("third", small.clone())).await;
                create(t, &pods, &pod("fourth", small)).await;

                let config_maps = format!("/api/v1/namespaces/{NAMESPACE}/configmaps");
                for name in ["one", "two", "three"] {
                    create(t, &config_maps, &config_map(name)).await;
                }
                let services = format!("/api/v1/namespaces/{NAMESPACE}/services");
                let node_ports = json!({"apiVersion": "v1", "kind": "Service",
                "metadata": {"name": "node-ports"},
                "spec": {"type": "NodePort", "selector": {"app": "a"},
                         "ports": [{"name": "a", "port": 80}, {"name": "b", "port": 81}]}});
                create(t, &services, &node_ports).await;
                let plain = json!({"apiVersion": "v1", "kind": "Service",
                "metadata": {"name": "plain"},
                "spec": {"selector": {"app": "a"}, "ports": [{"port": 80}]}});
                create(t, &services, &plain).await;
                let leases = format!("/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases");
                for name in ["held", "extra"] {
                    let lease = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                                   "metadata": {"name": name}});
                    create(t, &leases, &lease).await;
                }
                let claims = format!("/api/v1/namespaces/{NAMESPACE}/persistentvolumeclaims");
                for (name, size) in [("big", "2Gi"), ("small", "500Mi")] {
                    let claim = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                    "metadata": {"name": name},
                    "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "none",
                             "resources": {"requests": {"storage": size}}}});
                    create(t, &claims, &claim).await;
                }
                status_once(t, "charged", |s| s["used"]["configmaps"] == "3").await;

                let one = format!("{config_maps}/one");
                let (code, text) = support::raw(&t.admin, "DELETE", &one, JSON, Vec::new()).await;
                assert_eq!(code, 200, "{}: DELETE {one}: {text}", t.name);
                let first = format!("{pods}/first");
                let grace = serde_json::to_vec(&json!({"gracePeriodSeconds": 0})).unwrap();
                let (code, text) = support::raw(&t.admin, "DELETE", &first, JSON, grace).await;
                assert_eq!(code, 200, "{}: DELETE {first}: {text}", t.name);
                status_once(t, "given back", |s| {
                    s["used"]["configmaps"] == "2" && s["used"]["pods"] == "1"
                })
                .await;
            }
        ),
    ]
}

fn limit_ranges() -> Interaction {
    interaction!(
        "limit ranges: a pod's defaults and annotation, and pods and claims out of range",
        |t| {
            const NS: &str = "limits";
            namespace_with_account(t, NS).await;
            let range = json!({"apiVersion": "v1", "kind": "LimitRange",
                "metadata": {"name": "ranges"},
                "spec": {"limits": [
                    {"type": "Container", "default": {"cpu": "500m", "memory": "256Mi"},
                     "defaultRequest": {"cpu": "100m"}, "min": {"cpu": "50m"},
                     "max": {"memory": "1Gi"}, "maxLimitRequestRatio": {"cpu": "10"}},
                    {"type": "Pod", "max": {"cpu": "2"}},
                    {"type": "PersistentVolumeClaim", "min": {"storage": "1Gi"},
                     "max": {"storage": "5Gi"}}]}});
            t.admin(
                "POST",
                &format!("/api/v1/namespaces/{NS}/limitranges"),
                JSON,
                range,
            )
            .await;
            let pods = format!("/api/v1/namespaces/{NS}/pods");
            let pod = |name: &str, containers: Value| {
                json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                       "spec": {"containers": containers}})
            };
            let mut defaulted = pod(
                "defaulted",
                json!([{"name": "bare", "image": "example/app:1"},
                       {"name": "limited", "image": "example/app:1",
                        "resources": {"limits": {"cpu": "200m"}}}]),
            );
            defaulted["spec"]["initContainers"] =
                json!([{"name": "setup", "image": "example/app:1"}]);
            assert_eq!(create(t, &pods, &defaulted).await, 201);
            record_resources(t, &format!("{pods}/defaulted")).await;
            record_client_fields(t, &format!("{pods}/defaulted")).await;
            // A pod created by server-side apply is defaulted as a POST is, the defaults
            // owned by no manager.
            let applied = pod(
                "applied",
                json!([{"name": "bare", "image": "example/app:1"},
                       {"name": "limited", "image": "example/app:1",
                        "resources": {"limits": {"cpu": "200m"}}}]),
            );
            let applied_path = format!("{pods}/applied");
            let apply = format!("{applied_path}?fieldManager=applier");
            send_recorded(t, "PATCH", &apply, APPLY, &applied).await;
            record_resources(t, &applied_path).await;
            record_client_fields(t, &applied_path).await;
            let out_of_range = pod(
                "applied-low",
                json!([{"name": "main", "image": "example/app:1",
                        "resources": {"requests": {"cpu": "10m"}}}]),
            );
            let apply = format!("{pods}/applied-low?fieldManager=applier");
            send_recorded(t, "PATCH", &apply, APPLY, &out_of_range).await;
            let one = |name: &str, resources: Value| {
                pod(
                    name,
                    json!([{"name": "main", "image": "example/app:1", "resources": resources}]),
                )
            };
            create(t, &pods, &one("low", json!({"requests": {"cpu": "10m"}}))).await;
            create(t, &pods, &one("big", json!({"limits": {"memory": "2Gi"}}))).await;
            let ratio = json!({"requests": {"cpu": "50m"}, "limits": {"cpu": "1"}});
            create(t, &pods, &one("ratio", ratio)).await;
            let whole: Vec<Value> = ["a", "b", "c"]
                .iter()
                .map(|n| {
                    json!({"name": n, "image": "example/app:1",
                               "resources": {"limits": {"cpu": "1"}}})
                })
                .collect();
            create(t, &pods, &pod("whole", json!(whole))).await;
            let claims = format!("/api/v1/namespaces/{NS}/persistentvolumeclaims");
            for (name, size) in [("tiny", "500Mi"), ("huge", "10Gi"), ("fits", "2Gi")] {
                let claim = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                    "metadata": {"name": name},
                    "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "none",
                             "resources": {"requests": {"storage": size}}}});
                create(t, &claims, &claim).await;
            }
        }
    )
}

/// Creates the namespace `name` and waits for its default ServiceAccount, which pods need.
async fn namespace_with_account(t: &super::Target, name: &str) {
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
    assert_eq!(create(t, "/api/v1/namespaces", &ns).await, 201);
    let account = format!("/api/v1/namespaces/{name}/serviceaccounts/default");
    wait_until(t, &account, "the default account", |code, _| code == 200).await;
}

/// Waits until the quota at `path` has a status where `settled`, then records it.
async fn quota_status(t: &super::Target, path: &str, what: &str, settled: impl Fn(&Value) -> bool) {
    wait_until(t, path, what, |code, body| {
        code == 200 && settled(&body["status"])
    })
    .await;
    let status = super::raw_get(t, path).await["status"].clone();
    t.record(Answer {
        asked: format!("GET {path}: status, {what}"),
        code: 200,
        body: normalize(status),
    });
}

/// Waits until each quota of `paths` has counted none of `resource`, and records it.
async fn computed(t: &super::Target, paths: &[&str], resource: &str) {
    for path in paths {
        quota_status(t, path, "computed", |s| s["used"][resource] == "0").await;
    }
}

fn terminating_scope() -> Interaction {
    interaction!(
        "resource quotas: a pod update moving a pod into the terminating scope is charged",
        |t| {
            const NS: &str = "quota-scopes";
            namespace_with_account(t, NS).await;
            let quotas = format!("/api/v1/namespaces/{NS}/resourcequotas");
            for (name, scope, pods) in [
                ("terminating", "Terminating", "1"),
                ("long-running", "NotTerminating", "3"),
            ] {
                let quota = json!({"apiVersion": "v1", "kind": "ResourceQuota",
                    "metadata": {"name": name},
                    "spec": {"hard": {"pods": pods}, "scopes": [scope]}});
                assert_eq!(create(t, &quotas, &quota).await, 201);
            }
            let terminating = format!("{quotas}/terminating");
            let long_running = format!("{quotas}/long-running");
            computed(t, &[&terminating, &long_running], "pods").await;

            let pods = format!("/api/v1/namespaces/{NS}/pods");
            for name in ["first", "second"] {
                assert_eq!(create(t, &pods, &pod(name, json!({}))).await, 201);
            }
            let mut deadline = pod("deadline", json!({}));
            deadline["spec"]["activeDeadlineSeconds"] = json!(600);
            assert_eq!(create(t, &pods, &deadline).await, 201);
            quota_status(t, &terminating, "charged", |s| s["used"]["pods"] == "1").await;
            quota_status(t, &long_running, "charged", |s| s["used"]["pods"] == "2").await;

            // Setting a deadline moves the pod into the full Terminating quota: refused.
            let set_deadline = json!({"spec": {"activeDeadlineSeconds": 300}});
            let first = format!("{pods}/first");
            send_recorded(t, "PATCH", &first, MERGE, &set_deadline).await;
            // A change that keeps the pod's scope is not charged.
            let label = json!({"metadata": {"labels": {"kept": "scope"}}});
            send_recorded(t, "PATCH", &format!("{pods}/deadline"), MERGE, &label).await;

            let grace = serde_json::to_vec(&json!({"gracePeriodSeconds": 0})).unwrap();
            let gone = format!("{pods}/deadline");
            let (code, text) = support::raw(&t.admin, "DELETE", &gone, JSON, grace).await;
            assert_eq!(code, 200, "{}: DELETE {gone}: {text}", t.name);
            quota_status(t, &terminating, "given back", |s| s["used"]["pods"] == "0").await;
            // With room, the update is charged to the Terminating quota, and the pod given
            // back to the NotTerminating one.
            assert_eq!(
                send_recorded(t, "PATCH", &first, MERGE, &set_deadline).await,
                200
            );
            quota_status(t, &terminating, "moved in", |s| s["used"]["pods"] == "1").await;
            quota_status(t, &long_running, "moved out", |s| s["used"]["pods"] == "1").await;
        }
    )
}

fn volume_attributes_class_scope() -> Interaction {
    interaction!(
        "resource quotas: claims counted by the volume attributes class scope",
        |t| {
            const NS: &str = "quota-classes";
            namespace_with_account(t, NS).await;
            let quotas = format!("/api/v1/namespaces/{NS}/resourcequotas");
            let gold = json!({"apiVersion": "v1", "kind": "ResourceQuota",
                "metadata": {"name": "gold"},
                "spec": {"hard": {"persistentvolumeclaims": "1", "requests.storage": "2Gi"},
                         "scopeSelector": {"matchExpressions": [
                             {"scopeName": "VolumeAttributesClass", "operator": "In",
                              "values": ["gold"]}]}}});
            assert_eq!(create(t, &quotas, &gold).await, 201);
            let unclassed = json!({"apiVersion": "v1", "kind": "ResourceQuota",
                "metadata": {"name": "unclassed"},
                "spec": {"hard": {"persistentvolumeclaims": "5"},
                         "scopeSelector": {"matchExpressions": [
                             {"scopeName": "VolumeAttributesClass",
                              "operator": "DoesNotExist"}]}}});
            assert_eq!(create(t, &quotas, &unclassed).await, 201);
            let gold_path = format!("{quotas}/gold");
            let unclassed_path = format!("{quotas}/unclassed");
            computed(t, &[&gold_path, &unclassed_path], "persistentvolumeclaims").await;

            let claims = format!("/api/v1/namespaces/{NS}/persistentvolumeclaims");
            let claim = |name: &str, class: Option<&str>| {
                let mut claim = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                    "metadata": {"name": name},
                    "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "none",
                             "resources": {"requests": {"storage": "1Gi"}}}});
                if let Some(class) = class {
                    claim["spec"]["volumeAttributesClassName"] = json!(class);
                }
                claim
            };
            create(t, &claims, &claim("gold-one", Some("gold"))).await;
            create(t, &claims, &claim("gold-two", Some("gold"))).await;
            create(t, &claims, &claim("silver", Some("silver"))).await;
            create(t, &claims, &claim("plain", None)).await;
            quota_status(t, &gold_path, "charged", |s| {
                s["used"]["persistentvolumeclaims"] == "1"
            })
            .await;
            quota_status(t, &unclassed_path, "charged", |s| {
                s["used"]["persistentvolumeclaims"] == "1"
            })
            .await;
        }
    )
}

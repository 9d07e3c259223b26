//! The built-in resources beyond the operators' usual few: discovery of every group version
//! kube-apiserver serves, and for each kind operators write most, a typical object created,
//! read, listed, refused when invalid and deleted.
//!
//! Status and `managedFields` are compared on the create's answer only: on the real control
//! plane kube-controller-manager's controllers (statefulset, disruption, persistent volume,
//! horizontal pod autoscaler) write status right after, and the simulator runs none of them.

use serde_json::{Value, json};

use super::{
    AGGREGATED, Answer, Interaction, JSON, MERGE, NS, Target, discovery, list_names, normalize,
    parse_body, raw_create, support, wait_until,
};

/// The interactions of this module, in the order they run.
pub(super) fn interactions() -> Vec<Interaction> {
    vec![
        interaction!(
            "built-in resources: discovery of every group version, plain and aggregated",
            |t| {
                discovery_of_every_group_version(t).await;
            }
        ),
        interaction!("built-in kinds: a StatefulSet", |t| {
            exercise(t, &STATEFUL_SET).await;
        }),
        interaction!("built-in kinds: a DaemonSet", |t| {
            exercise(t, &DAEMON_SET).await;
        }),
        interaction!(
            "built-in kinds: labels written through the status of a StatefulSet and a PodDisruptionBudget",
            |t| {
                for case in [&STATEFUL_SET, &DISRUPTION_BUDGET] {
                    let collection = (case.collection)();
                    let object = (case.object)();
                    let one = format!(
                        "{collection}/{}",
                        object["metadata"]["name"].as_str().unwrap()
                    );
                    raw_create(t, &collection, &object).await;
                    let patch = json!({"metadata": {"labels": {"via": "status"}}});
                    let body = serde_json::to_vec(&patch).unwrap();
                    let status = format!("{one}/status");
                    let (code, text) = support::raw(&t.admin, "PATCH", &status, MERGE, body).await;
                    t.record(Answer {
                        asked: format!("PATCH {status} with {patch}: the labels"),
                        code: i64::from(code),
                        body: parse_body(text)["metadata"]["labels"].clone(),
                    });
                    support::raw(&t.admin, "DELETE", &one, JSON, Vec::new()).await;
                    wait_until(t, &one, "the object gone", |code, _| code == 404).await;
                }
            }
        ),
        interaction!("built-in kinds: a DaemonSet's template generation", |t| {
            let collection = (DAEMON_SET.collection)();
            let one = format!("{collection}/agent");
            raw_create(t, &collection, &daemon_set()).await;
            for patch in [
                json!({"spec": {"template": {"spec": {"containers": [{"name": "agent",
                    "image": "busybox:1.37", "args": ["sleep", "3600"]}]}}}}),
                json!({"metadata": {"labels": {"tier": "node"}}}),
                json!({"spec": {"revisionHistoryLimit": 5}}),
                json!({"metadata": {"annotations": null}}),
            ] {
                let body = serde_json::to_vec(&patch).unwrap();
                let (code, text) = support::raw(&t.admin, "PATCH", &one, MERGE, body).await;
                let patched = without_controllers(parse_body(text));
                t.record(Answer {
                    asked: format!("PATCH {one} with {patch} (status and managedFields left out)"),
                    code: i64::from(code),
                    body: normalize(json!({"metadata": patched["metadata"]})),
                });
            }
            support::raw(&t.admin, "DELETE", &one, JSON, Vec::new()).await;
            wait_until(t, &one, "the DaemonSet gone", |code, _| code == 404).await;
        }),
        interaction!("built-in kinds: an EndpointSlice", |t| {
            exercise(t, &ENDPOINT_SLICE).await;
        }),
        interaction!("built-in kinds: a PersistentVolumeClaim", |t| {
            exercise(t, &CLAIM).await;
        }),
        interaction!("built-in kinds: a PersistentVolume", |t| {
            exercise(t, &VOLUME).await;
        }),
        interaction!("built-in kinds: a PodDisruptionBudget", |t| {
            exercise(t, &DISRUPTION_BUDGET).await;
        }),
        interaction!("built-in kinds: an Ingress", |t| {
            exercise(t, &INGRESS).await;
        }),
        interaction!("built-in kinds: a NetworkPolicy", |t| {
            exercise(t, &NETWORK_POLICY).await;
        }),
        interaction!("built-in kinds: a ValidatingWebhookConfiguration", |t| {
            exercise(t, &VALIDATING_WEBHOOKS).await;
        }),
        interaction!("built-in kinds: a MutatingWebhookConfiguration", |t| {
            exercise(t, &MUTATING_WEBHOOKS).await;
        }),
        interaction!("built-in kinds: a ValidatingAdmissionPolicy", |t| {
            exercise(t, &ADMISSION_POLICY).await;
        }),
        interaction!("built-in kinds: a PriorityClass", |t| {
            exercise(t, &PRIORITY_CLASS).await;
        }),
        interaction!("built-in kinds: a StorageClass", |t| {
            exercise(t, &STORAGE_CLASS).await;
        }),
        interaction!("built-in kinds: a HorizontalPodAutoscaler", |t| {
            exercise(t, &AUTOSCALER).await;
        }),
        interaction!(
            "built-in kinds: Endpoints, LimitRanges, ResourceQuotas and PodTemplates",
            |t| {
                for case in [&ENDPOINTS, &LIMIT_RANGE, &RESOURCE_QUOTA, &POD_TEMPLATE] {
                    exercise(t, case).await;
                }
            }
        ),
        interaction!(
            "built-in kinds: IngressClasses, RuntimeClasses and admission policy bindings",
            |t| {
                for case in [&INGRESS_CLASS, &RUNTIME_CLASS, &POLICY_BINDING] {
                    exercise(t, case).await;
                }
            }
        ),
        interaction!(
            "built-in kinds: CSI drivers, volume attachments and storage capacities",
            |t| {
                for case in [
                    &CSI_DRIVER,
                    &VOLUME_ATTACHMENT,
                    &STORAGE_CAPACITY,
                    &ATTRIBUTES_CLASS,
                ] {
                    exercise(t, case).await;
                }
            }
        ),
        interaction!("built-in kinds: ControllerRevisions", |t| {
            exercise(t, &CONTROLLER_REVISION).await;
        }),
        interaction!(
            "built-in kinds: DeviceClasses, ResourceClaims and their templates",
            |t| {
                for case in [&DEVICE_CLASS, &RESOURCE_CLAIM, &CLAIM_TEMPLATE] {
                    exercise(t, case).await;
                }
            }
        ),
        interaction!(
            "built-in kinds: a HorizontalPodAutoscaler of autoscaling/v1, read in both versions",
            |t| {
                let v1 = namespaced("autoscaling/v1", "horizontalpodautoscalers");
                let v2 = namespaced("autoscaling/v2", "horizontalpodautoscalers");
                for (name, target) in [("cpu", json!(70)), ("default", Value::Null)] {
                    let mut autoscaler = json!({"apiVersion": "autoscaling/v1",
                        "kind": "HorizontalPodAutoscaler",
                        "metadata": {"name": name, "namespace": NS},
                        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1",
                            "kind": "Deployment", "name": "web"}, "maxReplicas": 4}});
                    if !target.is_null() {
                        autoscaler["spec"]["targetCPUUtilizationPercentage"] = target;
                    }
                    let (code, text) = support::raw(
                        &t.admin,
                        "POST",
                        &v1,
                        JSON,
                        serde_json::to_vec(&autoscaler).unwrap(),
                    )
                    .await;
                    let mut created = parse_body(text);
                    if let Some(m) = created["metadata"].as_object_mut() {
                        m.remove("managedFields");
                    }
                    t.record(Answer {
                        asked: format!("POST {v1} ({name}; managedFields left out)"),
                        code: i64::from(code),
                        body: normalize(created),
                    });
                    for collection in [&v1, &v2] {
                        let one = format!("{collection}/{name}");
                        let (code, text) =
                            support::raw(&t.admin, "GET", &one, JSON, Vec::new()).await;
                        // The conditions the real controller writes show as an annotation in v1.
                        let mut read = without_controllers(parse_body(text));
                        if let Some(m) = read["metadata"].as_object_mut() {
                            m.remove("annotations");
                        }
                        t.record(Answer {
                            asked: format!(
                                "GET {one} (status, annotations and managedFields left out)"
                            ),
                            code: i64::from(code),
                            body: normalize(read),
                        });
                    }
                    let one = format!("{v2}/{name}");
                    support::raw(&t.admin, "DELETE", &one, JSON, Vec::new()).await;
                    wait_until(t, &one, "the autoscaler gone", |code, _| code == 404).await;
                }
            }
        ),
        interaction!(
            "built-in kinds: SelfSubjectRulesReviews of the admin and of a ServiceAccount",
            |t| {
                let reviews = "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews";
                let review = |namespace: &str| {
                    json!({"apiVersion": "authorization.k8s.io/v1",
                           "kind": "SelfSubjectRulesReview", "spec": {"namespace": namespace}})
                };
                // The real server lists the bindings in its informer's (random) order: the
                // rules are compared sorted.
                let record_sorted = |t: &Target, asked: String, code: u16, text: String| {
                    let mut answer = parse_body(text);
                    for key in ["resourceRules", "nonResourceRules"] {
                        if let Some(rules) = answer["status"]
                            .as_object_mut()
                            .and_then(|status| status.get_mut(key))
                            .and_then(Value::as_array_mut)
                        {
                            rules.sort_by_key(Value::to_string);
                        }
                    }
                    t.record(Answer {
                        asked,
                        code: i64::from(code),
                        body: normalize(answer),
                    });
                };
                for body in [review(NS), review("")] {
                    let (code, text) = support::raw(
                        &t.admin,
                        "POST",
                        reviews,
                        JSON,
                        serde_json::to_vec(&body).unwrap(),
                    )
                    .await;
                    record_sorted(
                        t,
                        format!("POST {reviews} as the admin: {body}"),
                        code,
                        text,
                    );
                }
                let account = "rules-reader";
                raw_create(
                    t,
                    &format!("/api/v1/namespaces/{NS}/serviceaccounts"),
                    &json!({"apiVersion": "v1", "kind": "ServiceAccount",
                            "metadata": {"name": account}}),
                )
                .await;
                raw_create(
                    t,
                    &format!("/apis/rbac.authorization.k8s.io/v1/namespaces/{NS}/roles"),
                    &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                            "metadata": {"name": account},
                            "rules": [{"apiGroups": [""], "resources": ["configmaps"],
                                       "verbs": ["get", "list"], "resourceNames": ["a"]},
                                      {"apiGroups": ["coordination.k8s.io"],
                                       "resources": ["leases"], "verbs": ["*"]}]}),
                )
                .await;
                raw_create(
                    t,
                    &format!("/apis/rbac.authorization.k8s.io/v1/namespaces/{NS}/rolebindings"),
                    &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                            "metadata": {"name": account},
                            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                        "name": account},
                            "subjects": [{"kind": "ServiceAccount", "name": account,
                                          "namespace": NS}]}),
                )
                .await;
                let token = super::raw_token(t, account).await;
                let client = t
                    .client_with_token(&format!("system:serviceaccount:{NS}:{account}"), &token)
                    .await;
                for namespace in [NS, "default"] {
                    let (code, text) = support::raw(
                        &client,
                        "POST",
                        reviews,
                        JSON,
                        serde_json::to_vec(&review(namespace)).unwrap(),
                    )
                    .await;
                    record_sorted(
                        t,
                        format!("POST {reviews} as the ServiceAccount in {namespace}"),
                        code,
                        text,
                    );
                }
            }
        ),
        interaction!("built-in kinds: a SelfSubjectReview and a Binding", |t| {
            let review =
                json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"});
            let reviews = "/apis/authentication.k8s.io/v1/selfsubjectreviews";
            let (code, text) = support::raw(
                &t.admin,
                "POST",
                reviews,
                JSON,
                serde_json::to_vec(&review).unwrap(),
            )
            .await;
            // The local control plane's token file gives its admin a uid; the simulator's
            // admin has none. The rest of the answer is compared.
            let mut answer = parse_body(text);
            if let Some(user) = answer["status"]["userInfo"].as_object_mut() {
                user.remove("uid");
            }
            t.record(Answer {
                asked: format!("POST {reviews} (the user's uid left out)"),
                code: i64::from(code),
                body: normalize(answer),
            });
            let pods = namespaced("v1", "pods");
            let pod = json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "bound-by-binding", "namespace": NS},
                "spec": {"schedulerName": "nobody", "containers": [{"name": "c", "image": "busybox:1.36"}]}});
            let (code, text) = support::raw(
                &t.admin,
                "POST",
                &pods,
                JSON,
                serde_json::to_vec(&pod).unwrap(),
            )
            .await;
            assert_eq!(code, 201, "{}: {text}", t.name);
            let binding = |name: &str| {
                json!({"apiVersion": "v1", "kind": "Binding",
                    "metadata": {"name": name, "namespace": NS},
                    "target": {"apiVersion": "v1", "kind": "Node", "name": "n1"}})
            };
            let bindings = namespaced("v1", "bindings");
            t.admin("POST", &bindings, JSON, binding("bound-by-binding"))
                .await;
            t.admin("POST", &bindings, JSON, binding("bound-by-binding"))
                .await;
            t.admin("POST", &bindings, JSON, binding("never-created"))
                .await;
            let one = format!("{pods}/bound-by-binding");
            let (_, text) = support::raw(&t.admin, "GET", &one, JSON, Vec::new()).await;
            t.record(Answer {
                asked: format!("GET {one}: its node"),
                code: 200,
                body: parse_body(text)["spec"]["nodeName"].clone(),
            });
            let now = serde_json::to_vec(&json!({"gracePeriodSeconds": 0})).unwrap();
            support::raw(&t.admin, "DELETE", &one, JSON, now).await;
            wait_until(t, &one, "the pod gone", |code, _| code == 404).await;
        }),
        interaction!(
            "built-in kinds: the field selectors of ReplicationControllers, Jobs and ResourceSlices",
            |t| {
                let controllers = namespaced("v1", "replicationcontrollers");
                t.admin("POST", &controllers, JSON, replication_controller())
                    .await;
                for selector in [
                    "status.replicas%3D0",
                    "status.replicas%3D1",
                    "spec.replicas%3D0",
                ] {
                    list_names(t, &format!("{controllers}?fieldSelector={selector}")).await;
                }
                for selector in ["status.successful%3D0", "status.failed%3D0"] {
                    list_names(t, &format!("/apis/batch/v1/jobs?fieldSelector={selector}")).await;
                }
                let slices = cluster("resource.k8s.io/v1", "resourceslices");
                for selector in [
                    "spec.nodeName%3Dn1,spec.driver%3Dd.example.com",
                    "metadata.namespace%3Ddefault",
                ] {
                    list_names(t, &format!("{slices}?fieldSelector={selector}")).await;
                }
                let one = format!("{controllers}/web");
                let orphan =
                    serde_json::to_vec(&json!({"propagationPolicy": "Background"})).unwrap();
                support::raw(&t.admin, "DELETE", &one, JSON, orphan).await;
                wait_until(t, &one, "the ReplicationController gone", |code, _| {
                    code == 404
                })
                .await;
            }
        ),
        interaction!(
            "built-in kinds: the server's own PriorityClasses, flow-control objects and service range",
            |t| {
                const SCHEDULING: &str = "/apis/scheduling.k8s.io/v1/priorityclasses";
                const FLOWCONTROL: &str = "/apis/flowcontrol.apiserver.k8s.io/v1";
                list_names(t, SCHEDULING).await;
                for name in ["system-node-critical", "system-cluster-critical"] {
                    t.admin("GET", &format!("{SCHEDULING}/{name}"), JSON, Value::Null)
                        .await;
                }
                for path in [
                    "/apis/networking.k8s.io/v1/servicecidrs/kubernetes",
                    "/apis/networking.k8s.io/v1/ipaddresses/10.0.0.1",
                ] {
                    t.admin("GET", path, JSON, Value::Null).await;
                }
                for resource in ["prioritylevelconfigurations", "flowschemas"] {
                    let path = format!("{FLOWCONTROL}/{resource}");
                    t.admin("GET", &path, JSON, Value::Null).await;
                }
            }
        ),
    ]
}

/// Whether a group is one of kube-apiserver's own (custom resources of other interactions
/// are left out).
fn built_in_group(group: &str) -> bool {
    !group.contains('.') || group.ends_with(".k8s.io")
}

/// ComponentStatuses are served by a part of the simulator compared elsewhere.
const COMPARED_ELSEWHERE: &[&str] = &["componentstatuses"];

/// A resource list's entries keyed by name, so that a resource one side lacks shows as
/// that resource's path.
fn by_name(entries: &Value, key: &str) -> Value {
    let map: serde_json::Map<String, Value> = entries
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| Some((e[key].as_str()?.to_string(), e.clone())))
        .filter(|(name, _)| !COMPARED_ELSEWHERE.contains(&name.as_str()))
        .collect();
    Value::Object(map)
}

/// `/apis` (plain), `/api/v1` and every built-in group version's resource list, and both
/// aggregated documents, every resource compared field by field.
async fn discovery_of_every_group_version(t: &Target) {
    let (_, text) = support::raw(&t.admin, "GET", "/apis", JSON, Vec::new()).await;
    let groups: Vec<Value> = parse_body(text)["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|g| built_in_group(g["name"].as_str().unwrap_or_default()))
        .cloned()
        .collect();
    t.record(Answer {
        asked: "GET /apis: the built-in groups, in order".into(),
        code: 200,
        body: json!(groups),
    });
    let mut paths = vec!["/api/v1".to_string()];
    paths.extend(
        groups
            .iter()
            .flat_map(|g| g["versions"].as_array().cloned().unwrap_or_default())
            .filter_map(|v| Some(format!("/apis/{}", v["groupVersion"].as_str()?))),
    );
    for path in paths {
        let (code, text) = support::raw(&t.admin, "GET", &path, JSON, Vec::new()).await;
        let list = parse_body(text);
        t.record(Answer {
            asked: format!("GET {path}"),
            code: i64::from(code),
            body: json!({"kind": list["kind"], "groupVersion": list["groupVersion"],
                "resources": by_name(&list["resources"], "name")}),
        });
    }
    for path in ["/api", "/apis"] {
        let document = discovery(t, path, AGGREGATED).await;
        for group in document["items"].as_array().into_iter().flatten() {
            let name = group["metadata"]["name"].as_str().unwrap_or_default();
            if !built_in_group(name) {
                continue;
            }
            let versions: Vec<Value> = group["versions"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|v| {
                    json!({"version": v["version"], "freshness": v["freshness"],
                        "resources": by_name(&v["resources"], "resource")})
                })
                .collect();
            t.record(Answer {
                asked: format!("GET {path} (aggregated): group {name:?}"),
                code: 200,
                body: json!({"metadata": group["metadata"], "versions": versions}),
            });
        }
    }
}

/// One kind as an operator writes it.
struct Case {
    /// The collection's path.
    collection: fn() -> String,
    /// A typical object.
    object: fn() -> Value,
    /// The same object made invalid in one place, for the kinds whose validation is
    /// compared.
    invalid: Option<fn() -> Value>,
    /// Whether the kind has a scale subresource.
    scale: bool,
    /// Finalizers only a controller removes (the real server's protection controllers):
    /// cleared after the delete, so the object goes on both sides.
    finalizers: bool,
}

fn namespaced(group_version: &str, resource: &str) -> String {
    let prefix = if group_version == "v1" {
        "/api/v1".to_string()
    } else {
        format!("/apis/{group_version}")
    };
    format!("{prefix}/namespaces/{NS}/{resource}")
}

fn cluster(group_version: &str, resource: &str) -> String {
    if group_version == "v1" {
        format!("/api/v1/{resource}")
    } else {
        format!("/apis/{group_version}/{resource}")
    }
}

/// Records `answer` with what controllers write left out (see the module docs).
fn without_controllers(mut body: Value) -> Value {
    if let Some(o) = body.as_object_mut() {
        o.remove("status");
    }
    if let Some(m) = body["metadata"].as_object_mut() {
        m.remove("managedFields");
    }
    body
}

/// Creates, reads, lists, refuses and deletes one object of a kind.
async fn exercise(t: &Target, case: &Case) {
    let collection = (case.collection)();
    let object = (case.object)();
    let name = object["metadata"]["name"].as_str().unwrap().to_string();
    let one = format!("{collection}/{name}");
    t.admin("POST", &collection, JSON, object).await;
    let (code, text) = support::raw(&t.admin, "GET", &one, JSON, Vec::new()).await;
    t.record(Answer {
        asked: format!("GET {one} (status and managedFields left out)"),
        code: i64::from(code),
        body: normalize(without_controllers(parse_body(text))),
    });
    list_names(t, &collection).await;
    if case.scale {
        t.admin("GET", &format!("{one}/scale"), JSON, Value::Null)
            .await;
    }
    if let Some(invalid) = case.invalid {
        t.admin("POST", &collection, JSON, invalid()).await;
    }
    let (code, text) = support::raw(&t.admin, "DELETE", &one, JSON, Vec::new()).await;
    t.record(Answer {
        asked: format!("DELETE {one} (status and managedFields left out)"),
        code: i64::from(code),
        body: normalize(without_controllers(parse_body(text))),
    });
    if case.finalizers {
        let clear = serde_json::to_vec(&json!({"metadata": {"finalizers": null}})).unwrap();
        support::raw(&t.admin, "PATCH", &one, MERGE, clear).await;
    }
    wait_until(t, &one, "the object gone", |code, _| code == 404).await;
}

/// A copy of `object` with `value` at the JSON pointer `at` (whose parent exists).
fn with(mut object: Value, at: &str, value: Value) -> Value {
    let (parent, key) = at.rsplit_once('/').unwrap();
    match object.pointer_mut(parent).unwrap() {
        Value::Array(items) => items[key.parse::<usize>().unwrap()] = value,
        parent => parent[key] = value,
    }
    object
}

const STATEFUL_SET: Case = Case {
    collection: || namespaced("apps/v1", "statefulsets"),
    object: stateful_set,
    invalid: Some(|| {
        with(
            stateful_set(),
            "/spec/template/metadata/labels",
            json!({"app": "other"}),
        )
    }),
    scale: true,
    finalizers: false,
};

/// No replicas, so that the real statefulset controller makes no pods and claims.
fn stateful_set() -> Value {
    json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "web", "namespace": NS, "labels": {"app": "web"}},
        "spec": {"serviceName": "web", "replicas": 0,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{
                "name": "nginx", "image": "nginx:1.27",
                "ports": [{"containerPort": 80, "name": "web"}],
                "volumeMounts": [{"name": "data", "mountPath": "/data"}]}]}},
            "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Gi"}}}}]}})
}

const DAEMON_SET: Case = Case {
    collection: || namespaced("apps/v1", "daemonsets"),
    object: daemon_set,
    invalid: Some(|| with(daemon_set(), "/spec/selector", json!({}))),
    scale: false,
    finalizers: false,
};

fn daemon_set() -> Value {
    json!({"apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": "agent", "namespace": NS},
        "spec": {"selector": {"matchLabels": {"app": "agent"}},
            "template": {"metadata": {"labels": {"app": "agent"}}, "spec": {
                "tolerations": [{"operator": "Exists"}],
                "containers": [{"name": "agent", "image": "busybox:1.36",
                    "args": ["sleep", "3600"]}]}}}})
}

const ENDPOINT_SLICE: Case = Case {
    collection: || namespaced("discovery.k8s.io/v1", "endpointslices"),
    object: endpoint_slice,
    invalid: Some(|| with(endpoint_slice(), "/addressType", json!("IPv5"))),
    scale: false,
    finalizers: false,
};

fn endpoint_slice() -> Value {
    json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "web-abc", "namespace": NS,
            "labels": {"kubernetes.io/service-name": "web"}},
        "addressType": "IPv4", "ports": [{"name": "http", "port": 80}],
        "endpoints": [{"addresses": ["10.1.2.3"], "conditions": {"ready": true},
            "nodeName": "n1"}]})
}

const CLAIM: Case = Case {
    collection: || namespaced("v1", "persistentvolumeclaims"),
    object: claim,
    invalid: Some(|| with(claim(), "/spec/accessModes", json!([]))),
    scale: false,
    finalizers: true,
};

/// Of a class that does not exist, so that the real persistent volume controller neither
/// binds nor provisions it.
fn claim() -> Value {
    json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "data", "namespace": NS},
        "spec": {"storageClassName": "standard", "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "1Gi"}}}})
}

const VOLUME: Case = Case {
    collection: || cluster("v1", "persistentvolumes"),
    object: volume,
    invalid: Some(|| with(volume(), "/spec/capacity", json!({}))),
    scale: false,
    finalizers: true,
};

fn volume() -> Value {
    json!({"apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": "differential-local"},
        "spec": {"storageClassName": "manual", "capacity": {"storage": "5Gi"},
            "accessModes": ["ReadWriteOnce"], "hostPath": {"path": "/tmp/pv"}}})
}

const DISRUPTION_BUDGET: Case = Case {
    collection: || namespaced("policy/v1", "poddisruptionbudgets"),
    object: disruption_budget,
    invalid: Some(|| with(disruption_budget(), "/spec/minAvailable", json!(-1))),
    scale: false,
    finalizers: false,
};

fn disruption_budget() -> Value {
    json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "web", "namespace": NS},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}}})
}

const INGRESS: Case = Case {
    collection: || namespaced("networking.k8s.io/v1", "ingresses"),
    object: ingress,
    invalid: Some(|| {
        with(
            ingress(),
            "/spec/rules/0/http/paths/0/pathType",
            json!("Everything"),
        )
    }),
    scale: false,
    finalizers: false,
};

fn ingress() -> Value {
    json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": "web", "namespace": NS},
        "spec": {"ingressClassName": "nginx", "rules": [{"host": "web.example.com",
            "http": {"paths": [{"path": "/", "pathType": "Prefix",
                "backend": {"service": {"name": "web", "port": {"number": 80}}}}]}}]}})
}

const NETWORK_POLICY: Case = Case {
    collection: || namespaced("networking.k8s.io/v1", "networkpolicies"),
    object: network_policy,
    invalid: Some(|| {
        with(
            network_policy(),
            "/spec/ingress/0/ports/0/protocol",
            json!("ICMP"),
        )
    }),
    scale: false,
    finalizers: false,
};

fn network_policy() -> Value {
    json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"name": "web", "namespace": NS},
        "spec": {"podSelector": {"matchLabels": {"app": "web"}},
            "ingress": [{"from": [{"podSelector": {"matchLabels": {"role": "client"}}}],
                "ports": [{"port": 80}]}]}})
}

const VALIDATING_WEBHOOKS: Case = Case {
    collection: || {
        cluster(
            "admissionregistration.k8s.io/v1",
            "validatingwebhookconfigurations",
        )
    },
    object: || webhooks("ValidatingWebhookConfiguration", "differential-validating"),
    invalid: Some(|| {
        with(
            webhooks("ValidatingWebhookConfiguration", "differential-invalid"),
            "/webhooks/0/sideEffects",
            json!("Some"),
        )
    }),
    scale: false,
    finalizers: false,
};

const MUTATING_WEBHOOKS: Case = Case {
    collection: || {
        cluster(
            "admissionregistration.k8s.io/v1",
            "mutatingwebhookconfigurations",
        )
    },
    object: || webhooks("MutatingWebhookConfiguration", "differential-mutating"),
    invalid: Some(|| {
        with(
            webhooks("MutatingWebhookConfiguration", "differential-invalid"),
            "/webhooks/0/admissionReviewVersions",
            json!([]),
        )
    }),
    scale: false,
    finalizers: false,
};

/// A webhook configuration as a kubebuilder project's `config/webhook` renders it.
fn webhooks(kind: &str, name: &str) -> Value {
    json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": kind,
        "metadata": {"name": name},
        "webhooks": [{"name": "vdeployment.example.com", "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
            "clientConfig": {"service": {"name": "webhook-service", "namespace": NS,
                "path": "/validate-apps-v1-deployment"}},
            "rules": [{"apiGroups": ["apps"], "apiVersions": ["v1"],
                "operations": ["CREATE", "UPDATE"], "resources": ["deployments"]}]}]})
}

const ADMISSION_POLICY: Case = Case {
    collection: || {
        cluster(
            "admissionregistration.k8s.io/v1",
            "validatingadmissionpolicies",
        )
    },
    object: admission_policy,
    invalid: Some(|| {
        with(
            admission_policy(),
            "/spec/failurePolicy",
            json!("Sometimes"),
        )
    }),
    scale: false,
    finalizers: false,
};

fn admission_policy() -> Value {
    json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": "differential-replicas"},
        "spec": {"matchConstraints": {"resourceRules": [{"apiGroups": ["apps"],
                "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
                "resources": ["deployments"]}]},
            "validations": [{"expression": "object.spec.replicas <= 5"}]}})
}

const PRIORITY_CLASS: Case = Case {
    collection: || cluster("scheduling.k8s.io/v1", "priorityclasses"),
    object: priority_class,
    invalid: Some(|| with(priority_class(), "/value", json!(2_000_000_001))),
    scale: false,
    finalizers: false,
};

fn priority_class() -> Value {
    json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
        "metadata": {"name": "differential-high"},
        "value": 1000, "description": "for the operator's pods"})
}

const STORAGE_CLASS: Case = Case {
    collection: || cluster("storage.k8s.io/v1", "storageclasses"),
    object: storage_class,
    invalid: Some(|| {
        let zone = |values: Value| json!({"key": "topology.kubernetes.io/zone", "values": values});
        with(
            with(storage_class(), "/provisioner", json!("")),
            "/allowedTopologies",
            json!([
                {"matchLabelExpressions": [zone(json!(["a", "a"])), zone(json!(["b"]))]},
                {"matchLabelExpressions": [{"key": "-rack", "values": []}]},
                {"matchLabelExpressions": [zone(json!(["b", "a"]))]},
                {"matchLabelExpressions": [zone(json!(["a", "b"]))]}
            ]),
        )
    }),
    scale: false,
    finalizers: false,
};

fn storage_class() -> Value {
    json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {"name": "differential-fast"},
        "provisioner": "example.com/fast", "parameters": {"type": "ssd"},
        "allowedTopologies": [{"matchLabelExpressions": [
            {"key": "topology.kubernetes.io/zone", "values": ["a", "b"]}]}]})
}

const AUTOSCALER: Case = Case {
    collection: || namespaced("autoscaling/v2", "horizontalpodautoscalers"),
    object: autoscaler,
    invalid: Some(|| with(autoscaler(), "/spec/maxReplicas", json!(0))),
    scale: false,
    finalizers: false,
};

fn autoscaler() -> Value {
    json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "web", "namespace": NS},
        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment",
                "name": "web"},
            "minReplicas": 1, "maxReplicas": 5,
            "metrics": [{"type": "Resource", "resource": {"name": "cpu",
                "target": {"type": "Utilization", "averageUtilization": 80}}}]}})
}

/// No replicas, so that the real replication manager makes no pods.
fn replication_controller() -> Value {
    json!({"apiVersion": "v1", "kind": "ReplicationController",
        "metadata": {"name": "web", "namespace": NS},
        "spec": {"replicas": 0, "selector": {"app": "web"},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": {
                "containers": [{"name": "nginx", "image": "nginx:1.27"}]}}}})
}

/// A kind checked for its defaults only.
const fn unvalidated(collection: fn() -> String, object: fn() -> Value) -> Case {
    Case {
        collection,
        object,
        invalid: None,
        scale: false,
        finalizers: false,
    }
}

fn endpoints() -> Value {
    json!({"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": "web", "namespace": NS},
    "subsets": [{"addresses": [{"ip": "10.1.2.3"}], "ports": [{"name": "http", "port": 80}]}]})
}

const ENDPOINTS: Case = Case {
    collection: || namespaced("v1", "endpoints"),
    object: endpoints,
    invalid: Some(|| {
        with(
            endpoints(),
            "/subsets",
            json!([
                {"addresses": [
                    {"ip": "127.0.0.1", "hostname": "Web_1", "nodeName": "Node_1",
                     "targetRef": {"kind": "Pod", "name": "web-0"}},
                    {"ip": "0.0.0.0", "nodeName": ""}],
                 "notReadyAddresses": [{"ip": "not-an-ip"}, {"ip": "169.254.1.1"}],
                 "ports": [{"port": 80},
                           {"name": "b", "port": 70000, "protocol": "ICMP", "appProtocol": "a/b/c"}]},
                {"ports": [{"name": "http", "port": 80}]}
            ]),
        )
    }),
    scale: false,
    finalizers: false,
};

const LIMIT_RANGE: Case = unvalidated(
    || namespaced("v1", "limitranges"),
    || {
        json!({"apiVersion": "v1", "kind": "LimitRange", "metadata": {"name": "limits", "namespace": NS},
        "spec": {"limits": [{"type": "Container", "max": {"cpu": "1"}, "default": {"memory": "128Mi"}}]}})
    },
);

const RESOURCE_QUOTA: Case = unvalidated(
    || namespaced("v1", "resourcequotas"),
    || {
        json!({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "quota", "namespace": NS},
        "spec": {"hard": {"pods": "10", "requests.cpu": "4"}}})
    },
);

const POD_TEMPLATE: Case = unvalidated(
    || namespaced("v1", "podtemplates"),
    || {
        json!({"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "worker", "namespace": NS},
        "template": {"metadata": {"labels": {"app": "worker"}},
            "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]}}})
    },
);

const INGRESS_CLASS: Case = unvalidated(
    || cluster("networking.k8s.io/v1", "ingressclasses"),
    || {
        json!({"apiVersion": "networking.k8s.io/v1", "kind": "IngressClass",
        "metadata": {"name": "differential-nginx"},
        "spec": {"controller": "example.com/ingress-nginx"}})
    },
);

const RUNTIME_CLASS: Case = unvalidated(
    || cluster("node.k8s.io/v1", "runtimeclasses"),
    || {
        json!({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
        "metadata": {"name": "differential-gvisor"}, "handler": "runsc"})
    },
);

const POLICY_BINDING: Case = unvalidated(
    || {
        cluster(
            "admissionregistration.k8s.io/v1",
            "validatingadmissionpolicybindings",
        )
    },
    || {
        json!({"apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding", "metadata": {"name": "differential-replicas"},
        "spec": {"policyName": "differential-replicas", "validationActions": ["Deny"],
            "matchResources": {"namespaceSelector": {"matchLabels": {"env": "test"}}}}})
    },
);

const CSI_DRIVER: Case = unvalidated(
    || cluster("storage.k8s.io/v1", "csidrivers"),
    || {
        json!({"apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver",
        "metadata": {"name": "differential.csi.example.com"}, "spec": {}})
    },
);

const VOLUME_ATTACHMENT: Case = unvalidated(
    || cluster("storage.k8s.io/v1", "volumeattachments"),
    || {
        json!({"apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttachment",
        "metadata": {"name": "differential-attachment"},
        "spec": {"attacher": "differential.csi.example.com", "nodeName": "n1",
            "source": {"persistentVolumeName": "differential-local"}}})
    },
);

const STORAGE_CAPACITY: Case = unvalidated(
    || namespaced("storage.k8s.io/v1", "csistoragecapacities"),
    || {
        json!({"apiVersion": "storage.k8s.io/v1", "kind": "CSIStorageCapacity",
        "metadata": {"name": "capacity", "namespace": NS},
        "storageClassName": "differential-fast", "capacity": "10Gi"})
    },
);

const ATTRIBUTES_CLASS: Case = Case {
    collection: || cluster("storage.k8s.io/v1", "volumeattributesclasses"),
    object: attributes_class,
    invalid: Some(|| {
        let mut class = with(attributes_class(), "/driverName", json!(""));
        class.as_object_mut().map(|c| c.remove("parameters"));
        class
    }),
    scale: false,
    finalizers: true,
};

fn attributes_class() -> Value {
    json!({"apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttributesClass",
        "metadata": {"name": "differential-gold"},
        "driverName": "differential.csi.example.com", "parameters": {"iops": "3000"}})
}

const CONTROLLER_REVISION: Case = unvalidated(
    || namespaced("apps/v1", "controllerrevisions"),
    || {
        json!({"apiVersion": "apps/v1", "kind": "ControllerRevision",
        "metadata": {"name": "web-1", "namespace": NS}, "revision": 1,
        "data": {"spec": {"template": {"metadata": {"labels": {"app": "web"}}}}}})
    },
);

const DEVICE_CLASS: Case = unvalidated(
    || cluster("resource.k8s.io/v1", "deviceclasses"),
    || {
        json!({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
        "metadata": {"name": "differential-gpu"},
        "spec": {"selectors": [{"cel": {"expression": "device.driver == \"gpu.example.com\""}}]}})
    },
);

const RESOURCE_CLAIM: Case = unvalidated(
    || namespaced("resource.k8s.io/v1", "resourceclaims"),
    || {
        json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": "gpu", "namespace": NS},
        "spec": {"devices": {"requests": [{"name": "gpu",
            "exactly": {"deviceClassName": "differential-gpu"}}]}}})
    },
);

const CLAIM_TEMPLATE: Case = unvalidated(
    || namespaced("resource.k8s.io/v1", "resourceclaimtemplates"),
    || {
        json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
        "metadata": {"name": "gpu", "namespace": NS},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu",
            "exactly": {"deviceClassName": "differential-gpu"}}]}}}})
    },
);

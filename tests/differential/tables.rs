//! `kubectl get`'s Tables (`Accept: application/json;as=Table;v=v1;g=meta.k8s.io`) of the
//! kinds the simulator prints: their column definitions, and the cells of typical objects
//! (a pod pending, then running with a container in back-off, services of each type,
//! configmaps, secrets, serviceaccounts, a namespace, a Deployment, a ReplicaSet, a
//! StatefulSet, a Lease, the default convertor's kinds, a custom resource with printer
//! columns and one without, a suspended Job and CronJob, a DaemonSet, ControllerRevisions
//! with and without a controller, Endpoints, a PodDisruptionBudget, an Ingress, a
//! NetworkPolicy and a PriorityClass; Events of both groups, EndpointSlices, autoscalers,
//! a ReplicationController, a PodTemplate, bindings, a Node of the test's own, webhook
//! configurations, a ValidatingAdmissionPolicy and its bindings, ingress, runtime and
//! volume attributes classes, a CSI driver, node and attachment, a CertificateSigningRequest,
//! a ResourceQuota, the `kubernetes` ServiceCIDR and IPAddress, the flow control
//! configuration, etcd's ComponentStatus),
//! with `includeObject` and a single object's Table. Ages are
//! masked: the two servers' objects were not created at the same instant. The workloads'
//! rows leave their objects out: when a controller writes status in the second its object
//! was created, the order of the two managedFields entries is a race on either server.

use serde_json::{Value, json};

use super::{
    Answer, Interaction, JSON, STRATEGIC, Target, normalize, parse_body, raw_create, support,
    wait_until,
};

/// The namespace of these interactions.
const NAMESPACE: &str = "tables";

const TABLE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json";

/// GETs `path` as a Table and records it, the cells of its age columns (an event's last and
/// first seen too, and a cell past the last column) masked unless `<unknown>` (and a
/// restart's "(… ago)").
pub(super) async fn table(t: &Target, path: &str) {
    let (code, answer) = get_table(t, path).await;
    let ages: Vec<usize> = answer["columnDefinitions"]
        .as_array()
        .map(|columns| {
            columns
                .iter()
                .enumerate()
                .filter(|(_, c)| {
                    matches!(
                        c["name"].as_str(),
                        Some("Age" | "Created At" | "Last Seen" | "First Seen")
                    )
                })
                .map(|(i, _)| i)
                .collect()
        })
        .unwrap_or_default();
    let columns = answer["columnDefinitions"].as_array().map_or(0, Vec::len);
    let mut answer = answer;
    if let Some(rows) = answer["rows"].as_array_mut() {
        for row in rows {
            if let Some(cells) = row["cells"].as_array_mut() {
                for (i, cell) in cells.iter_mut().enumerate() {
                    // An IPAddress's age has no column: kube-apiserver defines only two.
                    let columnless = columns > 0 && i >= columns;
                    if (ages.contains(&i) || columnless) && *cell != "<unknown>" {
                        *cell = json!("<age>");
                    } else if let Some(text) = cell.as_str()
                        && let Some(at) = text.find(" (")
                        && text.ends_with(" ago)")
                    {
                        *cell = json!(format!("{} (<age> ago)", &text[..at]));
                    }
                }
            }
        }
    }
    t.record(Answer {
        asked: format!("GET {path} as a Table"),
        code: i64::from(code),
        body: normalize(answer),
    });
}

async fn get_table(t: &Target, path: &str) -> (u16, Value) {
    let request = http::Request::builder()
        .method("GET")
        .uri(path)
        .header("accept", TABLE)
        .body(kube::client::Body::from(Vec::new()))
        .unwrap();
    let response = t.admin.send(request).await.unwrap();
    let code = response.status().as_u16();
    let bytes = http_body_util::BodyExt::collect(response.into_body())
        .await
        .unwrap()
        .to_bytes();
    (
        code,
        parse_body(String::from_utf8_lossy(&bytes).into_owned()),
    )
}

fn ns_path(group_version: &str, resource: &str) -> String {
    let prefix = if group_version == "v1" {
        "/api/v1".to_string()
    } else {
        format!("/apis/{group_version}")
    };
    format!("{prefix}/namespaces/{NAMESPACE}/{resource}")
}

fn template(app: &str) -> Value {
    json!({"metadata": {"labels": {"app": app}},
           "spec": {"containers": [{"name": "main", "image": "example/app:1"},
                                   {"name": "side", "image": "example/side:2"}]}})
}

/// The interactions of this module, in the order they run.
pub(super) fn interactions() -> Vec<Interaction> {
    vec![
        interaction!(
            "tables: pods, services, configmaps, secrets, accounts and namespaces",
            |t| {
                raw_create(
                    t,
                    "/api/v1/namespaces",
                    &json!({"apiVersion": "v1", "kind": "Namespace",
                            "metadata": {"name": NAMESPACE}}),
                )
                .await;
                let account = format!("/api/v1/namespaces/{NAMESPACE}/serviceaccounts/default");
                wait_until(t, &account, "the default account", |code, _| code == 200).await;
                let pod = json!({"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": "web-0"},
                    "spec": {"containers": [{"name": "main", "image": "example/app:1"},
                                            {"name": "side", "image": "example/side:2"}],
                             "readinessGates": [{"conditionType": "example.com/ready"}]}});
                raw_create(t, &ns_path("v1", "pods"), &pod).await;
                // Without its object: the scheduler's status write races with the read.
                table(
                    t,
                    &format!("{}/web-0?includeObject=None", ns_path("v1", "pods")),
                )
                .await;
                // The kubelet's part: running, one container ready, the other in back-off.
                let status = json!({"status": {"phase": "Running", "podIP": "10.244.0.5",
                    "podIPs": [{"ip": "10.244.0.5"}],
                    "conditions": [{"type": "Ready", "status": "False"},
                                   {"type": "example.com/ready", "status": "True"}],
                    "containerStatuses": [
                        {"name": "main", "ready": true, "restartCount": 0, "image": "example/app:1",
                         "imageID": "", "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}},
                        {"name": "side", "ready": false, "restartCount": 4, "image": "example/side:2",
                         "imageID": "", "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                         "lastState": {"terminated": {"exitCode": 1,
                            "startedAt": "2026-01-01T00:00:00Z", "finishedAt": "2026-01-01T00:00:01Z"}}}]}});
                let path = format!("{}/web-0/status", ns_path("v1", "pods"));
                let (code, text) = support::raw(
                    &t.admin,
                    "PATCH",
                    &path,
                    STRATEGIC,
                    serde_json::to_vec(&status).unwrap(),
                )
                .await;
                assert_eq!(code, 200, "{}: {text}", t.name);
                table(t, &format!("{}?includeObject=None", ns_path("v1", "pods"))).await;
                for (name, spec) in [
                    (
                        "plain",
                        json!({"selector": {"app": "web", "tier": "a"},
                                     "clusterIP": "10.0.0.30",
                                     "ports": [{"name": "http", "port": 80}, {"name": "dns", "port": 53, "protocol": "UDP"}]}),
                    ),
                    (
                        "exposed",
                        json!({"type": "NodePort", "clusterIP": "10.0.0.31",
                                       "ports": [{"port": 80, "nodePort": 30080}]}),
                    ),
                    (
                        "balanced",
                        json!({"type": "LoadBalancer", "clusterIP": "10.0.0.32",
                                        "externalIPs": ["192.0.2.1"],
                                        "ports": [{"port": 443, "nodePort": 30443}]}),
                    ),
                    (
                        "elsewhere",
                        json!({"type": "ExternalName", "externalName": "db.example.com"}),
                    ),
                    (
                        "headless",
                        json!({"clusterIP": "None", "selector": {"app": "db"}}),
                    ),
                ] {
                    let service = json!({"apiVersion": "v1", "kind": "Service",
                                         "metadata": {"name": name}, "spec": spec});
                    raw_create(t, &ns_path("v1", "services"), &service).await;
                }
                table(t, &ns_path("v1", "services")).await;
                raw_create(
                    t,
                    &ns_path("v1", "configmaps"),
                    &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings"},
                            "data": {"a": "1", "b": "2"}, "binaryData": {"c": "AA=="}}),
                )
                .await;
                table(
                    t,
                    &format!("{}?includeObject=Object", ns_path("v1", "configmaps")),
                )
                .await;
                raw_create(
                    t,
                    &ns_path("v1", "secrets"),
                    &json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "token"},
                            "type": "Opaque", "stringData": {"a": "1"}}),
                )
                .await;
                table(t, &ns_path("v1", "secrets")).await;
                table(t, &ns_path("v1", "serviceaccounts")).await;
                table(t, &format!("/api/v1/namespaces/{NAMESPACE}")).await;
                table(t, "/api/v1/namespaces?fieldSelector=metadata.name%3Dtables").await;
            }
        ),
        interaction!(
            "tables: workloads, leases, the default convertor and custom resources",
            |t| {
                let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment",
                    "metadata": {"name": "idle"},
                    "spec": {"replicas": 0,
                             "selector": {"matchLabels": {"app": "idle"},
                                          "matchExpressions": [{"key": "tier", "operator": "In", "values": ["b", "a"]}]},
                             "template": {"metadata": {"labels": {"app": "idle", "tier": "a"}},
                                          "spec": template("idle")["spec"]}}});
                raw_create(t, &ns_path("apps/v1", "deployments"), &deployment).await;
                let path = format!("{}/idle", ns_path("apps/v1", "deployments"));
                wait_until(t, &path, "the Deployment observed", |code, body| {
                    code == 200 && body["status"]["observedGeneration"] == 1
                })
                .await;
                table(t, &format!("{path}?includeObject=None")).await;
                let replica_set = json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
                    "metadata": {"name": "bare"},
                    "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "bare"}},
                             "template": template("bare")}});
                raw_create(t, &ns_path("apps/v1", "replicasets"), &replica_set).await;
                let path = format!("{}/bare", ns_path("apps/v1", "replicasets"));
                wait_until(t, &path, "the ReplicaSet observed", |code, body| {
                    code == 200 && body["status"]["observedGeneration"] == 1
                })
                .await;
                table(t, &format!("{path}?includeObject=None")).await;
                let stateful_set = json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
                    "metadata": {"name": "db"},
                    "spec": {"replicas": 0, "serviceName": "db",
                             "selector": {"matchLabels": {"app": "db"}}, "template": template("db")}});
                raw_create(t, &ns_path("apps/v1", "statefulsets"), &stateful_set).await;
                table(
                    t,
                    &format!(
                        "{}/db?includeObject=None",
                        ns_path("apps/v1", "statefulsets")
                    ),
                )
                .await;
                raw_create(
                    t,
                    &ns_path("coordination.k8s.io/v1", "leases"),
                    &json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                            "metadata": {"name": "leader"}, "spec": {"holderIdentity": "web-0"}}),
                )
                .await;
                table(t, &ns_path("coordination.k8s.io/v1", "leases")).await;
                raw_create(
                    t,
                    &ns_path("rbac.authorization.k8s.io/v1", "roles"),
                    &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                            "metadata": {"name": "reader"}, "rules": []}),
                )
                .await;
                table(t, &ns_path("rbac.authorization.k8s.io/v1", "roles")).await;
                let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                    "metadata": {"name": "caches.tables.example.com"},
                    "spec": {"group": "tables.example.com", "scope": "Namespaced",
                             "names": {"plural": "caches", "singular": "cache", "kind": "Cache", "listKind": "CacheList"},
                             "versions": [
                                {"name": "v1", "served": true, "storage": true,
                                 "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
                                 "additionalPrinterColumns": [
                                    {"name": "Size", "type": "integer", "jsonPath": ".spec.size"},
                                    {"name": "Phase", "type": "string", "jsonPath": ".status.phase", "description": "Where it is."},
                                    {"name": "First", "type": "string", "jsonPath": ".spec.nodes[0]", "priority": 1},
                                    {"name": "Missing", "type": "string", "jsonPath": ".status.nothing"},
                                    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}]},
                                {"name": "v2", "served": true, "storage": false,
                                 "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}});
                raw_create(
                    t,
                    "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                    &crd,
                )
                .await;
                let caches = format!("/apis/tables.example.com/v1/namespaces/{NAMESPACE}/caches");
                wait_until(t, &caches, "the custom resource served", |code, _| {
                    code == 200
                })
                .await;
                raw_create(
                    t,
                    &caches,
                    &json!({"apiVersion": "tables.example.com/v1", "kind": "Cache",
                            "metadata": {"name": "small"},
                            "spec": {"size": 3, "nodes": ["a", "b"]}, "status": {"phase": "Ready"}}),
                )
                .await;
                table(t, &caches).await;
                table(
                    t,
                    &format!("/apis/tables.example.com/v2/namespaces/{NAMESPACE}/caches/small"),
                )
                .await;
                support::raw(
                    &t.admin,
                    "DELETE",
                    "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/caches.tables.example.com",
                    JSON,
                    Vec::new(),
                )
                .await;
            }
        ),
        interaction!(
            "tables: jobs, cronjobs, daemonsets, revisions, endpoints, budgets, ingresses, network policies and priority classes",
            |t| {
                let job = json!({"apiVersion": "batch/v1", "kind": "Job",
                    "metadata": {"name": "later"},
                    "spec": {"suspend": true, "parallelism": 2, "template": {"spec": {
                        "restartPolicy": "Never",
                        "containers": [{"name": "c", "image": "busybox", "command": ["true"]}]}}}});
                raw_create(t, &ns_path("batch/v1", "jobs"), &job).await;
                let path = format!("{}/later", ns_path("batch/v1", "jobs"));
                wait_until(t, &path, "the Job suspended", |code, body| {
                    code == 200
                        && body["status"]["conditions"]
                            .as_array()
                            .is_some_and(|c| c.iter().any(|c| c["type"] == "Suspended"))
                })
                .await;
                table(t, &format!("{path}?includeObject=None")).await;
                let cron_job = json!({"apiVersion": "batch/v1", "kind": "CronJob",
                    "metadata": {"name": "nightly"},
                    "spec": {"schedule": "30 2 * * *", "timeZone": "Europe/Paris", "suspend": true,
                             "jobTemplate": {"spec": {"template": job["spec"]["template"].clone()}}}});
                raw_create(t, &ns_path("batch/v1", "cronjobs"), &cron_job).await;
                table(t, &ns_path("batch/v1", "cronjobs")).await;
                let daemon_set = json!({"apiVersion": "apps/v1", "kind": "DaemonSet",
                    "metadata": {"name": "agent"},
                    "spec": {"selector": {"matchLabels": {"app": "agent"}},
                             "template": {"metadata": {"labels": {"app": "agent"}},
                                          "spec": {"nodeSelector": {"role": "edge", "disk": "ssd"},
                                                   "containers": template("agent")["spec"]["containers"].clone()}}}});
                raw_create(t, &ns_path("apps/v1", "daemonsets"), &daemon_set).await;
                let path = format!("{}/agent", ns_path("apps/v1", "daemonsets"));
                wait_until(t, &path, "the DaemonSet observed", |code, body| {
                    code == 200 && body["status"]["observedGeneration"] == 1
                })
                .await;
                table(t, &format!("{path}?includeObject=None")).await;
                let owner = json!({"apiVersion": "v1", "kind": "ConfigMap",
                                   "metadata": {"name": "revisions-owner"}});
                let configmaps = ns_path("v1", "configmaps");
                raw_create(t, &configmaps, &owner).await;
                let owner_path = format!("{configmaps}/revisions-owner");
                let (_, text) = support::raw(&t.admin, "GET", &owner_path, JSON, Vec::new()).await;
                let owner = parse_body(text);
                for (name, owners) in [
                    (
                        "owned",
                        json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "revisions-owner",
                                      "uid": owner["metadata"]["uid"], "controller": true}]),
                    ),
                    ("orphan", json!([])),
                ] {
                    raw_create(
                        t,
                        &ns_path("apps/v1", "controllerrevisions"),
                        &json!({"apiVersion": "apps/v1", "kind": "ControllerRevision",
                                "metadata": {"name": name, "ownerReferences": owners},
                                "data": {"spec": {}}, "revision": 3}),
                    )
                    .await;
                }
                for name in ["owned", "orphan"] {
                    table(
                        t,
                        &format!("{}/{name}", ns_path("apps/v1", "controllerrevisions")),
                    )
                    .await;
                }
                let address = |ip: &str| json!({"ip": ip});
                raw_create(
                    t,
                    &ns_path("v1", "endpoints"),
                    &json!({"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": "manual"},
                            "subsets": [
                                {"addresses": [address("10.1.0.1"), address("10.1.0.2")],
                                 "ports": [{"name": "http", "port": 80}, {"name": "https", "port": 443}]},
                                {"addresses": [address("10.1.0.3")]}]}),
                )
                .await;
                table(t, &format!("{}/manual", ns_path("v1", "endpoints"))).await;
                raw_create(
                    t,
                    &ns_path("policy/v1", "poddisruptionbudgets"),
                    &json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                            "metadata": {"name": "keep-one"},
                            "spec": {"minAvailable": "50%", "selector": {"matchLabels": {"app": "none"}}}}),
                )
                .await;
                let path = format!("{}/keep-one", ns_path("policy/v1", "poddisruptionbudgets"));
                wait_until(t, &path, "the budget observed", |code, body| {
                    code == 200 && body["status"]["observedGeneration"] == 1
                })
                .await;
                table(t, &format!("{path}?includeObject=None")).await;
                raw_create(
                    t,
                    &ns_path("networking.k8s.io/v1", "ingresses"),
                    &json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
                            "metadata": {"name": "front"},
                            "spec": {"ingressClassName": "nginx",
                                     "tls": [{"hosts": ["a.example.com"]}],
                                     "rules": [{"host": "a.example.com"}, {"host": "b.example.com"}, {},
                                               {"host": "c.example.com"}, {"host": "d.example.com"}]}}),
                )
                .await;
                table(t, &ns_path("networking.k8s.io/v1", "ingresses")).await;
                raw_create(
                    t,
                    &ns_path("networking.k8s.io/v1", "networkpolicies"),
                    &json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                            "metadata": {"name": "deny"},
                            "spec": {"podSelector": {"matchLabels": {"app": "db"}}, "policyTypes": ["Ingress"]}}),
                )
                .await;
                table(t, &ns_path("networking.k8s.io/v1", "networkpolicies")).await;
                let priority = "/apis/scheduling.k8s.io/v1/priorityclasses";
                raw_create(
                    t,
                    priority,
                    &json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                            "metadata": {"name": "differential-tables"}, "value": 1000,
                            "preemptionPolicy": "Never"}),
                )
                .await;
                table(t, &format!("{priority}/differential-tables")).await;
                support::raw(
                    &t.admin,
                    "DELETE",
                    &format!("{priority}/differential-tables"),
                    JSON,
                    Vec::new(),
                )
                .await;
            }
        ),
        interaction!(
            "tables: events, endpoint slices, autoscalers, controllers, templates, quotas and bindings",
            |t| {
                let at = "2026-01-01T00:00:00Z";
                raw_create(
                    t,
                    &ns_path("v1", "events"),
                    &json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "web-0.started"},
                            "involvedObject": {"kind": "Pod", "name": "web-0", "namespace": NAMESPACE,
                                               "fieldPath": "spec.containers{main}"},
                            "reason": "Started", "message": " Started container main\n", "type": "Normal",
                            "source": {"component": "kubelet", "host": "node-a"},
                            "firstTimestamp": at, "lastTimestamp": at, "count": 3}),
                )
                .await;
                raw_create(
                    t,
                    &ns_path("v1", "events"),
                    &json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "bare"},
                            "involvedObject": {"kind": "Namespace", "namespace": NAMESPACE},
                            "reason": "Checked", "type": "Warning"}),
                )
                .await;
                raw_create(
                    t,
                    &ns_path("events.k8s.io/v1", "events"),
                    &json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "reconciled"},
                            "eventTime": "2026-01-01T00:00:00.000000Z",
                            "series": {"count": 4, "lastObservedTime": "2026-01-02T00:00:00.000000Z"},
                            "reportingController": "example.com/operator", "reportingInstance": "operator-0",
                            "action": "Reconcile", "reason": "Reconciled", "type": "Normal",
                            "regarding": {"kind": "ConfigMap", "name": "settings", "namespace": NAMESPACE},
                            "note": "reconciled settings"}),
                )
                .await;
                // Without their objects: the managedFields of an Event created through
                // events.k8s.io name its fields there on the real server, not here.
                for name in ["web-0.started", "bare", "reconciled"] {
                    for group_version in ["v1", "events.k8s.io/v1"] {
                        let path = format!("{}/{name}", ns_path(group_version, "events"));
                        table(t, &format!("{path}?includeObject=None")).await;
                    }
                }
                let slices = ns_path("discovery.k8s.io/v1", "endpointslices");
                raw_create(
                    t,
                    &slices,
                    &json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                            "metadata": {"name": "manual-abc"}, "addressType": "IPv4",
                            "ports": [{"name": "http", "port": 80}, {"name": "metrics"},
                                      {"name": "https", "port": 443}, {"name": "dns", "port": 53}],
                            "endpoints": [{"addresses": ["10.1.0.1"]}, {"addresses": ["10.1.0.2"]},
                                          {"addresses": ["10.1.0.3"]}, {"addresses": ["10.1.0.4"]}]}),
                )
                .await;
                raw_create(
                    t,
                    &slices,
                    &json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                            "metadata": {"name": "empty"}, "addressType": "IPv6", "endpoints": []}),
                )
                .await;
                table(t, &format!("{slices}/manual-abc")).await;
                // Without its object: the real server's managedFields keep the empty list of
                // endpoints, not the simulator's.
                table(t, &format!("{slices}/empty?includeObject=None")).await;
                // The autoscalers aim at the Deployment of no replicas: neither server's
                // status has a replica or a metric to show.
                let autoscalers = ns_path("autoscaling/v2", "horizontalpodautoscalers");
                let target = json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": "idle"});
                raw_create(
                    t,
                    &autoscalers,
                    &json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
                            "metadata": {"name": "busy"},
                            "spec": {"scaleTargetRef": target, "minReplicas": 2, "maxReplicas": 5,
                                     "metrics": [
                                        {"type": "Resource", "resource": {"name": "cpu",
                                            "target": {"type": "Utilization", "averageUtilization": 60}}},
                                        {"type": "Pods", "pods": {"metric": {"name": "packets"},
                                            "target": {"type": "AverageValue", "averageValue": "1k"}}},
                                        {"type": "External", "external": {"metric": {"name": "queue"},
                                            "target": {"type": "Value", "value": "30"}}}]}}),
                )
                .await;
                raw_create(
                    t,
                    &autoscalers,
                    &json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
                            "metadata": {"name": "plain"},
                            "spec": {"scaleTargetRef": target, "maxReplicas": 3}}),
                )
                .await;
                for name in ["busy", "plain"] {
                    table(t, &format!("{autoscalers}/{name}?includeObject=None")).await;
                }
                table(
                    t,
                    &format!(
                        "{}/plain?includeObject=None",
                        ns_path("autoscaling/v1", "horizontalpodautoscalers")
                    ),
                )
                .await;
                raw_create(
                    t,
                    &ns_path("v1", "replicationcontrollers"),
                    &json!({"apiVersion": "v1", "kind": "ReplicationController", "metadata": {"name": "legacy"},
                            "spec": {"replicas": 0, "selector": {"app": "legacy"}, "template": template("legacy")}}),
                )
                .await;
                table(
                    t,
                    &format!(
                        "{}/legacy?includeObject=None",
                        ns_path("v1", "replicationcontrollers")
                    ),
                )
                .await;
                let mut pod_template = template("templated");
                pod_template["metadata"]["labels"]["tier"] = json!("a");
                raw_create(
                    t,
                    &ns_path("v1", "podtemplates"),
                    &json!({"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "templated"},
                            "template": pod_template}),
                )
                .await;
                table(t, &ns_path("v1", "podtemplates")).await;
                // The quota controllers count the one pod template and no pod.
                let hard =
                    json!({"count/podtemplates": "5", "limits.cpu": "2", "requests.memory": "1Gi"});
                raw_create(
                    t,
                    &ns_path("v1", "resourcequotas"),
                    &json!({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "bounded"},
                            "spec": {"hard": hard}}),
                )
                .await;
                let path = format!("{}/bounded", ns_path("v1", "resourcequotas"));
                wait_until(t, &path, "the quota's usage", |code, body| {
                    code == 200 && body["status"]["used"]["count/podtemplates"] == "1"
                })
                .await;
                table(t, &format!("{path}?includeObject=None")).await;
                raw_create(
                    t,
                    &ns_path("rbac.authorization.k8s.io/v1", "rolebindings"),
                    &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                            "metadata": {"name": "readers"},
                            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "reader"},
                            "subjects": [
                                {"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "alice"},
                                {"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": "devs"},
                                {"kind": "ServiceAccount", "name": "default", "namespace": NAMESPACE},
                                {"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "bob"}]}),
                )
                .await;
                table(t, &ns_path("rbac.authorization.k8s.io/v1", "rolebindings")).await;
                let namespace = format!("/api/v1/namespaces/{NAMESPACE}");
                support::raw(&t.admin, "DELETE", &namespace, JSON, Vec::new()).await;
                wait_until(t, &namespace, "the namespace gone", |code, _| code == 404).await;
            }
        ),
        interaction!(
            "tables: nodes, cluster bindings, admission configurations, classes, drivers, signing requests, service addresses and flow control",
            |t| {
                let node = "differential-tables-node";
                raw_create(
                    t,
                    "/api/v1/nodes",
                    &json!({"apiVersion": "v1", "kind": "Node",
                            "metadata": {"name": node, "labels": {
                                "node-role.kubernetes.io/worker": "", "node-role.kubernetes.io/infra": "",
                                "kubernetes.io/role": "edge"}},
                            "spec": {"unschedulable": true,
                                     "taints": [{"key": "example.com/fake", "effect": "NoSchedule"}]}}),
                )
                .await;
                let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
                let status = json!({"status": {
                    "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                    "lastHeartbeatTime": now, "lastTransitionTime": now}],
                    "addresses": [{"type": "Hostname", "address": node},
                                  {"type": "InternalIP", "address": "192.0.2.10"}],
                    "nodeInfo": {"kubeletVersion": "v1.34.4", "osImage": "Debian GNU/Linux 13",
                                 "kernelVersion": "", "containerRuntimeVersion": "",
                                 "machineID": "", "systemUUID": "", "bootID": "", "kubeProxyVersion": "",
                                 "operatingSystem": "linux", "architecture": "amd64"}}});
                let path = format!("/api/v1/nodes/{node}");
                let (code, text) = support::raw(
                    &t.admin,
                    "PATCH",
                    &format!("{path}/status"),
                    STRATEGIC,
                    serde_json::to_vec(&status).unwrap(),
                )
                .await;
                assert_eq!(code, 200, "{}: {text}", t.name);
                table(t, &format!("{path}?includeObject=None")).await;
                let bindings = "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings";
                raw_create(
                    t,
                    bindings,
                    &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                            "metadata": {"name": "differential-tables"},
                            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
                            "subjects": [{"kind": "ServiceAccount", "name": "a", "namespace": "x"},
                                         {"kind": "ServiceAccount", "name": "b", "namespace": "y"}]}),
                )
                .await;
                let webhooks =
                    "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations";
                raw_create(
                    t,
                    webhooks,
                    &json!({"apiVersion": "admissionregistration.k8s.io/v1",
                            "kind": "ValidatingWebhookConfiguration",
                            "metadata": {"name": "differential-tables"},
                            "webhooks": [{"name": "check.tables.example.com",
                                "clientConfig": {"url": "https://127.0.0.1:1/check"},
                                "rules": [{"operations": ["CREATE"], "apiGroups": ["tables.example.com"],
                                           "apiVersions": ["*"], "resources": ["widgets"]}],
                                "failurePolicy": "Ignore", "sideEffects": "None",
                                "admissionReviewVersions": ["v1"]}]}),
                )
                .await;
                let mutating =
                    "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations";
                raw_create(
                    t,
                    mutating,
                    &json!({"apiVersion": "admissionregistration.k8s.io/v1",
                            "kind": "MutatingWebhookConfiguration",
                            "metadata": {"name": "differential-tables"}}),
                )
                .await;
                let policies = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies";
                raw_create(
                    t,
                    policies,
                    &json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
                            "metadata": {"name": "differential-tables"},
                            "spec": {"paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
                                     "matchConstraints": {"resourceRules": [{
                                        "operations": ["CREATE"], "apiGroups": ["tables.example.com"],
                                        "apiVersions": ["*"], "resources": ["widgets"]}]},
                                     "validations": [{"expression": "true"}, {"expression": "1 == 1"}]}}),
                )
                .await;
                let policy_bindings =
                    "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings";
                for (name, param) in [
                    (
                        "differential-tables-named",
                        json!({"name": "settings", "namespace": "tables", "parameterNotFoundAction": "Deny"}),
                    ),
                    (
                        "differential-tables-any",
                        json!({"name": "settings", "parameterNotFoundAction": "Allow"}),
                    ),
                    (
                        "differential-tables-selected",
                        json!({"selector": {"matchLabels": {"b": "2", "a": "1"}},
                                       "parameterNotFoundAction": "Deny"}),
                    ),
                ] {
                    raw_create(
                        t,
                        policy_bindings,
                        &json!({"apiVersion": "admissionregistration.k8s.io/v1",
                                "kind": "ValidatingAdmissionPolicyBinding", "metadata": {"name": name},
                                "spec": {"policyName": "differential-tables", "paramRef": param,
                                         "validationActions": ["Deny"]}}),
                    )
                    .await;
                }
                let classes = "/apis/networking.k8s.io/v1/ingressclasses";
                raw_create(
                    t,
                    classes,
                    &json!({"apiVersion": "networking.k8s.io/v1", "kind": "IngressClass",
                            "metadata": {"name": "differential-tables"},
                            "spec": {"controller": "example.com/ingress",
                                     "parameters": {"apiGroup": "k8s.example.com", "kind": "IngressParameters",
                                                    "name": "external", "scope": "Cluster"}}}),
                )
                .await;
                let runtimes = "/apis/node.k8s.io/v1/runtimeclasses";
                raw_create(
                    t,
                    runtimes,
                    &json!({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
                            "metadata": {"name": "differential-tables"}, "handler": "runc"}),
                )
                .await;
                let drivers = "/apis/storage.k8s.io/v1/csidrivers";
                raw_create(
                    t,
                    drivers,
                    &json!({"apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver",
                            "metadata": {"name": "tables.csi.example.com"},
                            "spec": {"attachRequired": false,
                                     "tokenRequests": [{"audience": "a"}, {"audience": "b"}],
                                     "volumeLifecycleModes": ["Persistent", "Ephemeral"]}}),
                )
                .await;
                let csi_nodes = "/apis/storage.k8s.io/v1/csinodes";
                raw_create(
                    t,
                    csi_nodes,
                    &json!({"apiVersion": "storage.k8s.io/v1", "kind": "CSINode",
                            "metadata": {"name": node},
                            "spec": {"drivers": [{"name": "tables.csi.example.com", "nodeID": "n1"}]}}),
                )
                .await;
                let attachments = "/apis/storage.k8s.io/v1/volumeattachments";
                raw_create(
                    t,
                    attachments,
                    &json!({"apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttachment",
                            "metadata": {"name": "differential-tables"},
                            "spec": {"attacher": "tables.csi.example.com", "nodeName": node,
                                     "source": {"persistentVolumeName": "pv-tables"}}}),
                )
                .await;
                let attributes = "/apis/storage.k8s.io/v1/volumeattributesclasses";
                raw_create(
                    t,
                    attributes,
                    &json!({"apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttributesClass",
                            "metadata": {"name": "differential-tables"},
                            "driverName": "tables.csi.example.com", "parameters": {"iops": "100"}}),
                )
                .await;
                let requests = "/apis/certificates.k8s.io/v1/certificatesigningrequests";
                let key = rcgen::KeyPair::generate().unwrap();
                let pem = rcgen::CertificateParams::new(Vec::<String>::new())
                    .unwrap()
                    .serialize_request(&key)
                    .unwrap()
                    .pem()
                    .unwrap();
                raw_create(
                    t,
                    requests,
                    &json!({"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
                            "metadata": {"name": "differential-tables"},
                            "spec": {"request": base64::Engine::encode(
                                        &base64::engine::general_purpose::STANDARD, pem),
                                     "signerName": "example.com/tables", "expirationSeconds": 86400,
                                     "usages": ["digital signature"]}}),
                )
                .await;
                let names = [
                    (bindings, "differential-tables"),
                    (webhooks, "differential-tables"),
                    (mutating, "differential-tables"),
                    (policies, "differential-tables"),
                    (policy_bindings, "differential-tables-named"),
                    (policy_bindings, "differential-tables-any"),
                    (policy_bindings, "differential-tables-selected"),
                    (classes, "differential-tables"),
                    (runtimes, "differential-tables"),
                    (drivers, "tables.csi.example.com"),
                    (csi_nodes, node),
                    (attachments, "differential-tables"),
                    (attributes, "differential-tables"),
                    (requests, "differential-tables"),
                ];
                for (collection, name) in names {
                    table(t, &format!("{collection}/{name}?includeObject=None")).await;
                }
                // The service CIDR and the address of the `kubernetes` Service, both servers'.
                let networking = "/apis/networking.k8s.io/v1";
                table(
                    t,
                    &format!("{networking}/servicecidrs/kubernetes?includeObject=None"),
                )
                .await;
                table(
                    t,
                    &format!("{networking}/ipaddresses/10.0.0.1?includeObject=None"),
                )
                .await;
                // etcd's health, the one component both servers probe alike.
                table(t, "/api/v1/componentstatuses/etcd-0?includeObject=None").await;
                // The bootstrap flow control configuration, both servers' too.
                let flow_control = "/apis/flowcontrol.apiserver.k8s.io/v1";
                for resource in ["flowschemas", "prioritylevelconfigurations"] {
                    table(t, &format!("{flow_control}/{resource}?includeObject=None")).await;
                }
                for (collection, name) in names {
                    support::raw(
                        &t.admin,
                        "DELETE",
                        &format!("{collection}/{name}"),
                        JSON,
                        Vec::new(),
                    )
                    .await;
                }
                support::raw(&t.admin, "DELETE", &path, JSON, Vec::new()).await;
            }
        ),
    ]
}

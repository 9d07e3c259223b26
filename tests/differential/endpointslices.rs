//! The EndpointSlices and Endpoints kube-controller-manager's EndpointSlice and Endpoints
//! controllers write for Services with a selector, step by step as the admin plays the kubelet through
//! `pods/status` (phase Running, a pod IP, Ready false then true) and deletes a pod.
//! Neither control plane has nodes, so a Service that does not publish not-ready addresses
//! leaves every pod out (their node is unknown) and keeps its empty placeholder slice;
//! one that does lists them all. The Endpoints are compared before any pod has an IP only:
//! kube-apiserver refuses an address with an empty `nodeName`, so the real Endpoints
//! controller never lists a pod bound to no node, and the simulated API server does not
//! validate Endpoints yet. Slice names are generated (masked) and the endpoints of
//! a new slice come in no defined order upstream (sorted here by pod).

use serde_json::{Value, json};

use super::{
    Answer, Interaction, JSON, MERGE, NS, STRATEGIC, normalize, parse_body, support, wait_until,
};

/// The namespace of these interactions.
const NAMESPACE: &str = "endpointslices";

/// The cluster IP asked for the Service that has one (the simulator allocates none): from
/// the low band of the real server's 10.0.0.0/24, which it keeps for IPs asked for.
const STATIC_CLUSTER_IP: &str = "10.0.0.10";

fn pods() -> String {
    format!("/api/v1/namespaces/{NAMESPACE}/pods")
}

fn slices_of(service: &str) -> String {
    format!(
        "/apis/discovery.k8s.io/v1/namespaces/{NAMESPACE}/endpointslices?labelSelector=kubernetes.io%2Fservice-name%3D{service}"
    )
}

async fn post(t: &super::Target, path: &str, object: &Value) {
    let body = serde_json::to_vec(object).unwrap();
    let (code, text) = support::raw(&t.admin, "POST", path, JSON, body).await;
    assert_eq!(code, 201, "{}: POST {path}: {text}", t.name);
}

/// Reports the pod Running at `ip`, Ready or not since `since`, as its kubelet would.
async fn report(t: &super::Target, pod: &str, ip: &str, ready: bool, since: &str) {
    let status = json!({"status": {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}],
        "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" },
                        "lastTransitionTime": since}]}});
    let path = format!("{}/{pod}/status", pods());
    let body = serde_json::to_vec(&status).unwrap();
    let (code, text) = support::raw(&t.admin, "PATCH", &path, STRATEGIC, body).await;
    assert_eq!(code, 200, "{}: PATCH {path}: {text}", t.name);
}

/// The slices' endpoints of one Service, for the waits.
fn endpoints(list: &Value) -> Vec<Value> {
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|slice| slice["endpoints"].as_array().cloned().unwrap_or_default())
        .collect()
}

/// Waits until the Service's slices satisfy `settled`, then records them with their
/// generated names masked and each slice's endpoints sorted by pod. A slice's generation
/// counts its controller's writes, which depend on how the pod events fell into syncs on
/// either server: it is masked too.
async fn slices_once(
    t: &super::Target,
    service: &str,
    what: &str,
    settled: impl Fn(&Value) -> bool,
) {
    let path = slices_of(service);
    wait_until(
        t,
        &path,
        &format!("the slices of {service}: {what}"),
        |code, list| code == 200 && settled(list),
    )
    .await;
    let (code, text) = support::raw(&t.admin, "GET", &path, JSON, Vec::new()).await;
    let mut list = parse_body(text);
    for slice in list["items"].as_array_mut().into_iter().flatten() {
        slice["metadata"]["name"] = json!("<generated>");
        slice["metadata"]["generation"] = json!("<writes>");
        if let Some(endpoints) = slice["endpoints"].as_array_mut() {
            endpoints.sort_by_key(|e| {
                e["targetRef"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string()
            });
        }
    }
    t.record(Answer {
        asked: format!("GET {path}: {what}"),
        code: i64::from(code),
        body: normalize(list),
    });
}

/// Waits until the Service's Endpoints satisfy `settled` (given the numbers of ready and
/// not-ready addresses), then records them.
async fn endpoints_once(
    t: &super::Target,
    service: &str,
    what: &str,
    settled: impl Fn(usize, usize) -> bool,
) {
    let path = format!("/api/v1/namespaces/{NAMESPACE}/endpoints/{service}");
    let count = |endpoints: &Value, field: &str| -> usize {
        endpoints["subsets"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|s| s[field].as_array().map_or(0, Vec::len))
            .sum()
    };
    wait_until(
        t,
        &path,
        &format!("the endpoints of {service}: {what}"),
        |code, e| code == 200 && settled(count(e, "addresses"), count(e, "notReadyAddresses")),
    )
    .await;
    let (code, text) = support::raw(&t.admin, "GET", &path, JSON, Vec::new()).await;
    t.record(Answer {
        asked: format!("GET {path}: {what}"),
        code: i64::from(code),
        body: normalize(parse_body(text)),
    });
}

fn serving(list: &Value, pod: &str) -> bool {
    endpoints(list)
        .iter()
        .any(|e| e["targetRef"]["name"] == pod && e["conditions"]["serving"] == true)
}

/// The interactions of this module, in the order they run.
pub(super) fn interactions() -> Vec<Interaction> {
    vec![empty_endpoints(), controllers()]
}

/// An EndpointSlice written with an empty list of endpoints keeps it, in the object and in
/// its writer's managed fields: on create, on update, and when a patch empties the list.
fn empty_endpoints() -> Interaction {
    interaction!(
        "endpoint slices: an empty list of endpoints, created, updated and patched",
        |t| {
            let slices = format!("/apis/discovery.k8s.io/v1/namespaces/{NS}/endpointslices");
            let empty = json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                "metadata": {"name": "empty-endpoints"}, "addressType": "IPv4",
                "endpoints": []});
            t.admin(
                "POST",
                &format!("{slices}?fieldManager=creator"),
                JSON,
                empty,
            )
            .await;
            let one = format!("{slices}/empty-endpoints");
            t.admin("GET", &one, JSON, Value::Null).await;
            let (code, text) = support::raw(&t.admin, "GET", &one, JSON, Vec::new()).await;
            assert_eq!(code, 200, "{}: GET {one}: {text}", t.name);
            let mut read = parse_body(text);
            read["metadata"]["labels"] = json!({"edited": "true"});
            t.admin("PUT", &format!("{one}?fieldManager=editor"), JSON, read)
                .await;
            let listed = json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                "metadata": {"name": "emptied-endpoints"}, "addressType": "IPv4",
                "endpoints": [{"addresses": ["10.1.0.1"]}], "ports": []});
            t.admin(
                "POST",
                &format!("{slices}?fieldManager=creator"),
                JSON,
                listed,
            )
            .await;
            let emptied = format!("{slices}/emptied-endpoints?fieldManager=patcher");
            t.admin("PATCH", &emptied, MERGE, json!({"endpoints": []}))
                .await;
            t.admin(
                "GET",
                &format!("{slices}/emptied-endpoints"),
                JSON,
                Value::Null,
            )
            .await;
        }
    )
}

/// The controllers' slices and endpoints of two Services as their pods come and go.
fn controllers() -> Interaction {
    interaction!(
        "endpoint slices and endpoints: a Service's pods as their kubelet reports them",
        |t| {
            post(
                t,
                "/api/v1/namespaces",
                &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}),
            )
            .await;
            let account = format!("/api/v1/namespaces/{NAMESPACE}/serviceaccounts/default");
            wait_until(t, &account, "the default account", |code, _| code == 200).await;
            let services = format!("/api/v1/namespaces/{NAMESPACE}/services");
            post(
                t,
                &services,
                &json!({"apiVersion": "v1", "kind": "Service",
                        "metadata": {"name": "web", "labels": {"tier": "front"}},
                        "spec": {"selector": {"app": "web"}, "publishNotReadyAddresses": true,
                                 "clusterIP": STATIC_CLUSTER_IP, "ipFamilies": ["IPv4"],
                                 "ipFamilyPolicy": "SingleStack",
                                 "ports": [{"name": "http", "port": 80, "targetPort": "http"}]}}),
            )
            .await;
            post(
                t,
                &services,
                &json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "headless"},
                        "spec": {"selector": {"app": "web"}, "clusterIP": "None",
                                 "ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack",
                                 "ports": [{"port": 80, "targetPort": 8080}]}}),
            )
            .await;
            for (name, hostname) in [("web-1", Some("web-1")), ("web-2", None)] {
                let mut pod = json!({"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": name, "labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "main", "image": "example/app:1",
                                             "ports": [{"name": "http", "containerPort": 8080}]}]}});
                if let Some(hostname) = hostname {
                    pod["spec"]["hostname"] = json!(hostname);
                    pod["spec"]["subdomain"] = json!("web");
                }
                post(t, &pods(), &pod).await;
            }
            slices_once(t, "web", "a placeholder", |l| {
                l["items"].as_array().is_some_and(|i| i.len() == 1)
            })
            .await;
            endpoints_once(t, "web", "no address", |ready, not_ready| {
                ready + not_ready == 0
            })
            .await;
            endpoints_once(t, "headless", "no address", |ready, not_ready| {
                ready + not_ready == 0
            })
            .await;
            report(t, "web-1", "10.1.0.1", true, "2025-01-01T00:00:01Z").await;
            report(t, "web-2", "10.1.0.2", false, "2025-01-01T00:00:02Z").await;
            slices_once(t, "web", "two pods, one ready", |l| endpoints(l).len() == 2).await;
            report(t, "web-2", "10.1.0.2", true, "2025-01-01T00:00:03Z").await;
            slices_once(t, "web", "both ready", |l| serving(l, "web-2")).await;
            let (code, text) = support::raw(
                &t.admin,
                "DELETE",
                &format!("{}/web-1", pods()),
                JSON,
                Vec::new(),
            )
            .await;
            assert_eq!(code, 200, "{}: DELETE pod web-1: {text}", t.name);
            slices_once(t, "web", "one pod left", |l| endpoints(l).len() == 1).await;
            slices_once(t, "headless", "pods on unknown nodes left out", |l| {
                l["items"].as_array().is_some_and(|i| i.len() == 1)
            })
            .await;
            // The namespace goes in the background: nothing later uses its name.
            let namespace = format!("/api/v1/namespaces/{NAMESPACE}");
            support::raw(&t.admin, "DELETE", &namespace, JSON, Vec::new()).await;
        }
    )
}

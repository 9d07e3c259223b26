//! Services as kube-apiserver's Service storage answers them: the cluster IP and node ports
//! it allocates (random, so each is checked to be in its range and then masked), the
//! `IPAddress` object of an address and its release with the Service, requested addresses
//! and ports that are taken or out of range, the IP family fields of a single-stack
//! cluster, headless Services, an update that leaves out what was allocated or changes it,
//! an ExternalName Service changed to NodePort and ClusterIP and back, a dry run, and the
//! invalid Services operators most often write. The `IPAddress` of an address an update
//! gives is not read: kube-apiserver leaves it to its repair controller, which writes it at
//! once on a server that has run a while, not in its first minutes.

use std::net::Ipv4Addr;

use serde_json::{Value, json};

use super::{Answer, Interaction, JSON, Target, normalize, parse_body, support, wait_until};

/// The namespace of these interactions.
const NAMESPACE: &str = "services";

fn services() -> String {
    format!("/api/v1/namespaces/{NAMESPACE}/services")
}

fn address_path(ip: &str) -> String {
    format!("/apis/networking.k8s.io/v1/ipaddresses/{ip}")
}

fn service(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Service",
           "metadata": {"name": name, "namespace": NAMESPACE}, "spec": spec})
}

/// `value` with every string equal to one of `masks`' first elements replaced by the
/// second, and every number equal to one of `ports`' first elements by the second.
fn masked(value: Value, masks: &[(String, &str)], ports: &[(i64, &str)]) -> Value {
    match value {
        Value::String(s) => {
            let mut s = s;
            for (from, to) in masks {
                s = s.replace(from.as_str(), to);
            }
            for (from, to) in ports {
                s = s.replace(&from.to_string(), to);
            }
            Value::String(s)
        }
        Value::Number(n) => match ports.iter().find(|(p, _)| n.as_i64() == Some(*p)) {
            Some((_, to)) => Value::String((*to).to_string()),
            None => Value::Number(n),
        },
        Value::Array(items) => {
            Value::Array(items.into_iter().map(|v| masked(v, masks, ports)).collect())
        }
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(k, v)| (k, masked(v, masks, ports)))
                .collect(),
        ),
        other => other,
    }
}

/// Sends a request as the admin and records its answer with `masks` and `ports` applied;
/// returns the code and the body unmasked.
async fn send(
    t: &Target,
    method: &str,
    path: &str,
    body: &Value,
    masks: &[(String, &str)],
    ports: &[(i64, &str)],
) -> (u16, Value) {
    let bytes = if body.is_null() {
        Vec::new()
    } else {
        serde_json::to_vec(body).unwrap()
    };
    let (code, text) = support::raw(&t.admin, method, path, JSON, bytes).await;
    let parsed = parse_body(text);
    t.record(Answer {
        asked: format!("{method} {path}"),
        code: i64::from(code),
        body: normalize(masked(parsed.clone(), masks, ports)),
    });
    (code, parsed)
}

/// The cluster IP of a Service answer, checked to be taken from the part of the range
/// above the 16 addresses kept for requests (recorded as a fact, so both servers must
/// agree).
fn dynamic_ip(t: &Target, answer: &Value) -> String {
    let ip = answer["spec"]["clusterIP"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let parsed: Option<Ipv4Addr> = ip.parse().ok();
    let upper = parsed
        .is_some_and(|a| a >= Ipv4Addr::new(10, 0, 0, 17) && a <= Ipv4Addr::new(10, 0, 0, 254));
    t.record(Answer {
        asked: format!("the cluster IP {ip} is in 10.0.0.17-10.0.0.254"),
        code: 0,
        body: json!(upper),
    });
    ip
}

/// The node ports of a Service answer, checked to be in the range above its first 86.
fn dynamic_ports(t: &Target, answer: &Value) -> Vec<i64> {
    let ports: Vec<i64> = answer["spec"]["ports"]
        .as_array()
        .map(|p| p.iter().filter_map(|p| p["nodePort"].as_i64()).collect())
        .unwrap_or_default();
    t.record(Answer {
        asked: "the node ports are in 30086-32767".into(),
        code: 0,
        body: json!(ports.iter().all(|p| (30086..=32767).contains(p))),
    });
    ports
}

/// The interactions of this module, in the order they run.
pub(super) fn interactions() -> Vec<Interaction> {
    vec![
        interaction!(
            "services: a ClusterIP Service gets an address and its IPAddress, released with it",
            |t| {
                let namespace = json!({"apiVersion": "v1", "kind": "Namespace",
                                       "metadata": {"name": NAMESPACE}});
                send(t, "POST", "/api/v1/namespaces", &namespace, &[], &[]).await;
                let web = service(
                    "web",
                    json!({"selector": {"app": "web"},
                           "ports": [{"name": "http", "port": 80, "targetPort": "http"}]}),
                );
                let (_, created) = send_unrecorded(t, "POST", &services(), &web).await;
                let ip = dynamic_ip(t, &created);
                let masks = [(ip.clone(), "<cluster-ip>")];
                record_masked(t, "POST services: web", &created, &masks);
                send(t, "GET", &address_path(&ip), &Value::Null, &masks, &[]).await;
                send(
                    t,
                    "DELETE",
                    &format!("{}/web", services()),
                    &Value::Null,
                    &masks,
                    &[],
                )
                .await;
                send(t, "GET", &address_path(&ip), &Value::Null, &masks, &[]).await;
            }
        ),
        interaction!(
            "services: requested cluster IPs, taken and out of range, and IP families",
            |t| {
                let at = |name: &str, extra: Value| {
                    let mut spec = json!({"ports": [{"port": 80}]});
                    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
                        spec.extend(extra.clone());
                    }
                    service(name, spec)
                };
                for (name, extra) in [
                    ("fixed", json!({"clusterIP": "10.0.0.10"})),
                    ("fixed-again", json!({"clusterIP": "10.0.0.10"})),
                    ("broadcast", json!({"clusterIP": "10.0.0.255"})),
                    ("elsewhere", json!({"clusterIP": "10.1.0.1"})),
                    (
                        "dual",
                        json!({"ipFamilyPolicy": "RequireDualStack", "selector": {"a": "b"}}),
                    ),
                    ("prefer-dual", json!({"ipFamilyPolicy": "PreferDualStack"})),
                    ("six", json!({"ipFamilies": ["IPv6"]})),
                    ("plural", json!({"clusterIPs": ["10.0.0.11"]})),
                    (
                        "headless",
                        json!({"clusterIP": "None", "selector": {"app": "db"}}),
                    ),
                    ("headless-bare", json!({"clusterIP": "None", "ports": []})),
                    (
                        "external",
                        json!({"type": "ExternalName", "externalName": "db.example.com", "ports": []}),
                    ),
                ] {
                    let (code, body) =
                        send_unrecorded(t, "POST", &services(), &at(name, extra)).await;
                    let masks: Vec<(String, &str)> = if code == 201
                        && body["spec"]["clusterIP"].as_str().is_some_and(|ip| {
                            ip.starts_with("10.0.0.") && !["10.0.0.10", "10.0.0.11"].contains(&ip)
                        }) {
                        vec![(dynamic_ip(t, &body), "<cluster-ip>")]
                    } else {
                        Vec::new()
                    };
                    t.record(Answer {
                        asked: format!("POST services: {name}"),
                        code: i64::from(code),
                        body: normalize(masked(body, &masks, &[])),
                    });
                }
                send(t, "GET", &address_path("10.0.0.10"), &Value::Null, &[], &[]).await;
                let dry = format!("{}?dryRun=All", services());
                send(t, "POST", &dry, &at("dry", json!({})), &[], &[]).await;
                send(
                    t,
                    "POST",
                    &dry,
                    &at("dry-fixed", json!({"clusterIP": "10.0.0.10"})),
                    &[],
                    &[],
                )
                .await;
            }
        ),
        interaction!(
            "services: node ports, shared, taken and kept by an update; a changed address refused",
            |t| {
                let dns = service(
                    "dns",
                    json!({"type": "NodePort", "selector": {"app": "dns"},
                           "ports": [{"name": "tcp", "port": 53, "protocol": "TCP"},
                                     {"name": "udp", "port": 53, "protocol": "UDP"}]}),
                );
                let (_, created) = send_unrecorded(t, "POST", &services(), &dns).await;
                let ip = dynamic_ip(t, &created);
                let ports = dynamic_ports(t, &created);
                let port = ports.first().copied().unwrap_or_default();
                let masks = [(ip.clone(), "<cluster-ip>")];
                let port_masks = [(port, "<node-port>")];
                record_masked_ports(t, "POST services: dns", &created, &masks, &port_masks);
                let clash = service(
                    "clash",
                    json!({"type": "NodePort", "ports": [{"port": 80, "nodePort": port}]}),
                );
                send(t, "POST", &services(), &clash, &masks, &port_masks).await;
                let outside = service(
                    "outside",
                    json!({"type": "NodePort", "ports": [{"port": 80, "nodePort": 8080}]}),
                );
                send(t, "POST", &services(), &outside, &masks, &port_masks).await;
                // An update that leaves out the cluster IP and the node ports keeps them.
                let mut again = created.clone();
                if let Some(spec) = again["spec"].as_object_mut() {
                    spec.remove("clusterIP");
                    spec.remove("clusterIPs");
                }
                if let Some(list) = again["spec"]["ports"].as_array_mut() {
                    for p in list {
                        if let Some(p) = p.as_object_mut() {
                            p.remove("nodePort");
                        }
                    }
                }
                let path = format!("{}/dns", services());
                send(t, "PUT", &path, &again, &masks, &port_masks).await;
                // A changed cluster IP is refused.
                let (_, current) = send_unrecorded(t, "GET", &path, &Value::Null).await;
                let mut moved = current.clone();
                moved["spec"]["clusterIP"] = json!("10.0.0.12");
                moved["spec"]["clusterIPs"] = json!(["10.0.0.12"]);
                send(t, "PUT", &path, &moved, &masks, &port_masks).await;
                // To ClusterIP: the node ports are dropped (and must be, to be valid).
                let mut plain = current.clone();
                plain["spec"]["type"] = json!("ClusterIP");
                if let Some(list) = plain["spec"]["ports"].as_array_mut() {
                    for p in list {
                        if let Some(p) = p.as_object_mut() {
                            p.remove("nodePort");
                        }
                    }
                }
                send(t, "PUT", &path, &plain, &masks, &port_masks).await;
            }
        ),
        interaction!(
            "services: an ExternalName Service made NodePort gets an address and node ports, given up when made ExternalName again",
            |t| {
                let alias = service(
                    "alias",
                    json!({"type": "ExternalName", "externalName": "db.example.com",
                           "ports": [{"name": "http", "port": 80}]}),
                );
                let (_, created) = send_unrecorded(t, "POST", &services(), &alias).await;
                record_masked(t, "POST services: alias", &created, &[]);
                let path = format!("{}/alias", services());
                let to_node_port = json!({"spec": {"type": "NodePort", "externalName": null}});
                let dry = format!("{path}?dryRun=All");
                let (code, answer) = merge_patch(t, &dry, &to_node_port).await;
                // A dry run's node ports are the dry-run allocator's guesses, compared as they are.
                let dry_masks: Vec<(i64, &str)> = Vec::new();
                record_code(
                    t,
                    "PATCH alias to NodePort, dry run",
                    code,
                    &answer,
                    &[],
                    &dry_masks,
                );
                let (code, made) = merge_patch(t, &path, &to_node_port).await;
                let ip = dynamic_ip(t, &made);
                let ports = dynamic_ports(t, &made);
                let masks = [(ip.clone(), "<cluster-ip>")];
                let port_masks: Vec<(i64, &str)> =
                    ports.iter().map(|p| (*p, "<node-port>")).collect();
                record_code(
                    t,
                    "PATCH alias to NodePort",
                    code,
                    &made,
                    &masks,
                    &port_masks,
                );
                let back = json!({"spec": {"type": "ExternalName",
                                           "externalName": "db.example.com"}});
                let (code, answer) = merge_patch(t, &path, &back).await;
                record_code(
                    t,
                    "PATCH alias back to ExternalName",
                    code,
                    &answer,
                    &masks,
                    &port_masks,
                );
                // Whether the released address's IPAddress is still there is not compared:
                // kube-apiserver deletes it with the update, but its repair controller, working
                // from a Service it has not yet seen changed, may make it again and removes
                // that one only once it is 60 s old.
                let to_cluster_ip = json!({"spec": {"type": "ClusterIP", "externalName": null,
                                                    "clusterIP": "10.0.0.13"}});
                let (code, answer) = merge_patch(t, &path, &to_cluster_ip).await;
                record_code(
                    t,
                    "PATCH alias to ClusterIP 10.0.0.13",
                    code,
                    &answer,
                    &[],
                    &[],
                );
                send(t, "DELETE", &path, &Value::Null, &[], &[]).await;
            }
        ),
        interaction!("services: invalid ports and types", |t| {
            for (name, spec) in [
                ("no-ports", json!({"type": "ClusterIP"})),
                ("unnamed", json!({"ports": [{"port": 80}, {"port": 0}]})),
                (
                    "same-name",
                    json!({"ports": [{"name": "a", "port": 80}, {"name": "a", "port": 81}]}),
                ),
                (
                    "node-port-on-cluster-ip",
                    json!({"ports": [{"port": 80, "nodePort": 30123}]}),
                ),
                (
                    "headless-node-port",
                    json!({"type": "NodePort", "clusterIP": "None", "ports": [{"port": 80}]}),
                ),
                ("no-external-name", json!({"type": "ExternalName"})),
            ] {
                send(t, "POST", &services(), &service(name, spec), &[], &[]).await;
            }
            let namespace = format!("/api/v1/namespaces/{NAMESPACE}");
            support::raw(&t.admin, "DELETE", &namespace, JSON, Vec::new()).await;
            wait_until(t, &namespace, "the namespace gone", |code, _| code == 404).await;
        }),
    ]
}

/// Sends a request as the admin without recording it.
async fn send_unrecorded(t: &Target, method: &str, path: &str, body: &Value) -> (u16, Value) {
    let bytes = if body.is_null() {
        Vec::new()
    } else {
        serde_json::to_vec(body).unwrap()
    };
    let (code, text) = support::raw(&t.admin, method, path, JSON, bytes).await;
    (code, parse_body(text))
}

/// Sends a JSON merge patch as the admin without recording it.
async fn merge_patch(t: &Target, path: &str, patch: &Value) -> (u16, Value) {
    let bytes = serde_json::to_vec(patch).unwrap();
    let (code, text) = support::raw(
        &t.admin,
        "PATCH",
        path,
        "application/merge-patch+json",
        bytes,
    )
    .await;
    (code, parse_body(text))
}

/// Records an answer with its code, `masks` and `ports` applied.
fn record_code(
    t: &Target,
    asked: &str,
    code: u16,
    body: &Value,
    masks: &[(String, &str)],
    ports: &[(i64, &str)],
) {
    t.record(Answer {
        asked: asked.to_string(),
        code: i64::from(code),
        body: normalize(masked(body.clone(), masks, ports)),
    });
}

fn record_masked(t: &Target, asked: &str, body: &Value, masks: &[(String, &str)]) {
    record_masked_ports(t, asked, body, masks, &[]);
}

fn record_masked_ports(
    t: &Target,
    asked: &str,
    body: &Value,
    masks: &[(String, &str)],
    ports: &[(i64, &str)],
) {
    t.record(Answer {
        asked: asked.to_string(),
        code: 201,
        body: normalize(masked(body.clone(), masks, ports)),
    });
}

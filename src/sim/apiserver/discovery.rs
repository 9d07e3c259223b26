//! Discovery (/version, /api, /apis, per group-version resource lists) and the minimal
//! OpenAPI v3 that kubectl's validating `apply`/`create -f` need: every PATCH operation
//! declares the `fieldValidation` parameter, so kubectl leaves validation to the server.

use serde_json::{Value, json};

use super::registry::{Registry, ResourceType};

/// The Kubernetes version the simulator speaks.
pub const KUBE_MINOR: &str = "32";

/// `GET /version`.
pub fn version() -> Value {
    json!({
        "major": "1",
        "minor": KUBE_MINOR,
        "gitVersion": format!("v1.{KUBE_MINOR}.0-opconform"),
        "gitCommit": "",
        "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "",
        "compiler": "rustc",
        "platform": "linux/amd64",
    })
}

/// `GET /api`.
pub fn core_versions(server_address: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    })
}

fn group_entry(group: &str, versions: &[String]) -> Value {
    let gv = |v: &String| json!({"groupVersion": format!("{group}/{v}"), "version": v});
    json!({
        "name": group,
        "versions": versions.iter().map(gv).collect::<Vec<_>>(),
        "preferredVersion": versions.first().map(gv).unwrap_or(Value::Null),
    })
}

/// Served versions of each non-core group, preferred first.
fn groups(registry: &Registry) -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    for t in registry.all() {
        if t.group.is_empty() {
            continue;
        }
        match out.iter_mut().find(|(g, _)| *g == t.group) {
            Some((_, versions)) => {
                for v in &t.versions {
                    if !versions.contains(v) {
                        versions.push(v.clone());
                    }
                }
            }
            None => out.push((t.group.clone(), t.versions.clone())),
        }
    }
    out
}

/// `GET /apis`.
pub fn group_list(registry: &Registry) -> Value {
    json!({
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": groups(registry).iter().map(|(g, v)| group_entry(g, v)).collect::<Vec<_>>(),
    })
}

/// `GET /apis/{group}`, if served.
pub fn group(registry: &Registry, name: &str) -> Option<Value> {
    let (g, v) = groups(registry).into_iter().find(|(g, _)| g == name)?;
    let mut entry = group_entry(&g, &v);
    entry["kind"] = json!("APIGroup");
    entry["apiVersion"] = json!("v1");
    Some(entry)
}

fn resource_entries(t: &ResourceType) -> Vec<Value> {
    let mut main = json!({
        "name": t.resource,
        "singularName": t.singular,
        "namespaced": t.namespaced,
        "kind": t.kind,
        "verbs": t.verbs(),
    });
    if !t.short_names.is_empty() {
        main["shortNames"] = json!(t.short_names);
    }
    if !t.categories.is_empty() {
        main["categories"] = json!(t.categories);
    }
    let sub = |name: &str, kind: &str, group: Option<(&str, &str)>, verbs: &[&str]| {
        let mut e = json!({
            "name": format!("{}/{name}", t.resource),
            "singularName": "",
            "namespaced": t.namespaced,
            "kind": kind,
            "verbs": verbs,
        });
        if let Some((g, v)) = group {
            e["group"] = json!(g);
            e["version"] = json!(v);
        }
        e
    };
    let mut out = vec![main];
    if t.status {
        out.push(sub("status", &t.kind, None, &["get", "patch", "update"]));
    }
    if t.scale.is_some() {
        out.push(sub(
            "scale",
            "Scale",
            Some(("autoscaling", "v1")),
            &["get", "patch", "update"],
        ));
    }
    match (t.group.as_str(), t.resource.as_str()) {
        ("", "pods") => {
            out.push(sub("binding", "Binding", None, &["create"]));
            out.push(sub(
                "eviction",
                "Eviction",
                Some(("policy", "v1")),
                &["create"],
            ));
        }
        ("", "serviceaccounts") => out.push(sub(
            "token",
            "TokenRequest",
            Some(("authentication.k8s.io", "v1")),
            &["create"],
        )),
        ("", "namespaces") => out.push(sub("finalize", "Namespace", None, &["update"])),
        _ => {}
    }
    out
}

/// `GET /api/v1` or `/apis/{group}/{version}`, if served.
pub fn resource_list(registry: &Registry, group: &str, version: &str) -> Option<Value> {
    let types: Vec<&ResourceType> = registry
        .all()
        .filter(|t| t.group == group && t.versions.iter().any(|v| v == version))
        .collect();
    if types.is_empty() {
        return None;
    }
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Some(json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": gv,
        "resources": types.iter().flat_map(|t| resource_entries(t)).collect::<Vec<_>>(),
    }))
}

fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// `GET /openapi/v3`: the index of group-version documents.
pub fn openapi_index(registry: &Registry) -> Value {
    let mut paths = serde_json::Map::new();
    for (group, version) in registry.group_versions().keys() {
        let p = gv_path(group, version);
        paths.insert(
            p.clone(),
            json!({"serverRelativeURL": format!("/openapi/v3/{p}?hash=1")}),
        );
    }
    json!({"paths": paths})
}

/// `GET /openapi/v3/{api/v1|apis/g/v}`: a document whose PATCH operations carry the GVK
/// and the `fieldValidation` parameter.
pub fn openapi_document(registry: &Registry, path: &str) -> Option<Value> {
    let (group, version) = match path
        .trim_matches('/')
        .split('/')
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["api", v] => (String::new(), v.to_string()),
        ["apis", g, v] => (g.to_string(), v.to_string()),
        _ => return None,
    };
    let types = registry.group_versions();
    let types = types.get(&(group.clone(), version.clone()))?;
    let mut paths = serde_json::Map::new();
    for t in types {
        let gvk = json!({"group": t.group, "version": version, "kind": t.kind});
        let prefix = if t.namespaced {
            format!(
                "/{}/namespaces/{{namespace}}/{}",
                gv_path(&group, &version),
                t.resource
            )
        } else {
            format!("/{}/{}", gv_path(&group, &version), t.resource)
        };
        let op = |action: &str| {
            json!({
                "x-kubernetes-action": action,
                "x-kubernetes-group-version-kind": gvk,
                "parameters": [
                    {"name": "dryRun", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
                    {"name": "fieldManager", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
                    {"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
                ],
                "requestBody": {"content": {
                    "application/json-patch+json": {"schema": {"type": "object"}},
                    "application/merge-patch+json": {"schema": {"type": "object"}},
                    "application/apply-patch+yaml": {"schema": {"type": "object"}},
                }},
                "responses": {"200": {"description": "OK"}},
            })
        };
        paths.insert(
            format!("{prefix}/{{name}}"),
            json!({"patch": op("patch"), "put": op("put"), "get": {"x-kubernetes-action": "get", "x-kubernetes-group-version-kind": gvk, "responses": {"200": {"description": "OK"}}}}),
        );
        paths.insert(prefix, json!({"post": op("post")}));
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": format!("v1.{KUBE_MINOR}.0")},
        "paths": paths,
        "components": {"schemas": {}},
    }))
}

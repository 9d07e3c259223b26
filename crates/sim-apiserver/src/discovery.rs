//! Discovery (/version, /api, /apis, per group-version resource lists) and the minimal
//! OpenAPI v3 that kubectl's validating `apply`/`create -f` need: every PATCH operation
//! declares the `fieldValidation` parameter, so kubectl leaves validation to the server.

use serde_json::{Value, json};

use super::registry::{Backing, Registry, ResourceType};

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

/// The groups kube-apiserver 1.34 serves, in the order of their APIServices' priority
/// (`kube-aggregator`'s `apiVersionPriorities`); discovery lists groups in this order, then
/// any other group (custom resources) by name.
const GROUP_ORDER: &[&str] = &[
    "apiregistration.k8s.io",
    "apps",
    "events.k8s.io",
    "authentication.k8s.io",
    "authorization.k8s.io",
    "autoscaling",
    "batch",
    "certificates.k8s.io",
    "networking.k8s.io",
    "policy",
    "rbac.authorization.k8s.io",
    "storage.k8s.io",
    "admissionregistration.k8s.io",
    "apiextensions.k8s.io",
    "scheduling.k8s.io",
    "coordination.k8s.io",
    "node.k8s.io",
    "discovery.k8s.io",
    "resource.k8s.io",
    "flowcontrol.apiserver.k8s.io",
];

/// Where a group sorts in discovery: built-in groups by priority, then the rest by name.
fn group_rank(group: &str) -> (usize, &str) {
    let rank = GROUP_ORDER
        .iter()
        .position(|g| *g == group)
        .unwrap_or(GROUP_ORDER.len());
    (rank, group)
}

/// `version.CompareKubeAwareVersionStrings`: GA before beta before alpha, higher numbers
/// first, versions of another form after all of these, by name.
pub fn kube_aware_order(a: &str, b: &str) -> std::cmp::Ordering {
    fn parse(v: &str) -> Option<(u64, u8, u64)> {
        let rest = v.strip_prefix('v')?;
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let major = rest[..digits].parse().ok()?;
        let (level, minor) = match &rest[digits..] {
            "" => (2, 0),
            tail => {
                let (level, n) = if let Some(n) = tail.strip_prefix("beta") {
                    (1, n)
                } else {
                    (0, tail.strip_prefix("alpha")?)
                };
                (level, n.parse().ok()?)
            }
        };
        Some((major, level, minor))
    }
    match (parse(a), parse(b)) {
        (Some((ma, la, na)), Some((mb, lb, nb))) => (lb, mb, nb).cmp(&(la, ma, na)),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => a.cmp(b),
    }
}

/// Served versions of each non-core group, in discovery order; a group's versions as
/// [`ResourceType::versions`] gives them (preferred first).
pub fn groups(registry: &Registry) -> Vec<(String, Vec<String>)> {
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
    out.sort_by(|(a, _), (b, _)| group_rank(a).cmp(&group_rank(b)));
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

/// A subresource as discovery announces it.
pub struct Subresource {
    /// `status`, `scale`, …
    pub name: &'static str,
    /// The kind it answers with.
    pub kind: String,
    /// The group and version of that kind when not the resource's own.
    pub group_version: Option<(&'static str, &'static str)>,
    /// Its verbs.
    pub verbs: &'static [&'static str],
}

const GET_PATCH_UPDATE: &[&str] = &["get", "patch", "update"];

/// The verbs of a connect subresource that takes every HTTP method (`proxy`).
const PROXY: &[&str] = &["create", "delete", "get", "patch", "update"];

/// The verbs of a connect subresource that takes GET and POST (`exec`, `attach`,
/// `portforward`).
const CREATE_GET: &[&str] = &["create", "get"];

/// The verbs of a resource: those of its storage (namespaces have no `deletecollection`),
/// for custom resources in the order kube-apiserver's CRD handler lists them.
pub fn verbs(t: &ResourceType) -> Vec<&'static str> {
    if t.is_custom() {
        return vec![
            "delete",
            "deletecollection",
            "get",
            "list",
            "patch",
            "create",
            "update",
            "watch",
        ];
    }
    let mut verbs = t.verbs();
    if t.group.is_empty() && t.resource == "namespaces" {
        verbs.retain(|v| *v != "deletecollection");
    }
    verbs
}

/// The name a resource is known by in the singular: its own, or its kind in lower case as
/// kube-apiserver derives it.
pub fn singular(t: &ResourceType) -> String {
    if t.singular.is_empty() {
        t.kind.to_lowercase()
    } else {
        t.singular.clone()
    }
}

/// The subresources discovery announces for a resource, as kube-apiserver 1.34 does:
/// custom resources' status then scale, built-in resources' by name.
///
/// # Caveats
/// Some are announced and not served, so that clients see the real server's list:
/// `pods/attach`, `resize`, `services/proxy`, `nodes/proxy` (and `pods/proxy` serves GET
/// only).
pub fn subresources(t: &ResourceType) -> Vec<Subresource> {
    let sub = |name, kind: &str, group_version, verbs| Subresource {
        name,
        kind: kind.to_string(),
        group_version,
        verbs,
    };
    let mut out = Vec::new();
    if t.status {
        out.push(sub("status", &t.kind, None, GET_PATCH_UPDATE));
    }
    if t.scale.is_some() {
        out.push(sub(
            "scale",
            "Scale",
            Some(("autoscaling", "v1")),
            GET_PATCH_UPDATE,
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
            out.push(sub("log", "Pod", None, &["get"]));
            out.push(sub("attach", "PodAttachOptions", None, CREATE_GET));
            out.push(sub("exec", "PodExecOptions", None, CREATE_GET));
            out.push(sub(
                "portforward",
                "PodPortForwardOptions",
                None,
                CREATE_GET,
            ));
            out.push(sub("proxy", "PodProxyOptions", None, PROXY));
            out.push(sub("ephemeralcontainers", "Pod", None, GET_PATCH_UPDATE));
            out.push(sub("resize", "Pod", None, GET_PATCH_UPDATE));
        }
        ("", "services") => out.push(sub("proxy", "ServiceProxyOptions", None, PROXY)),
        ("", "nodes") => out.push(sub("proxy", "NodeProxyOptions", None, PROXY)),
        ("", "serviceaccounts") => out.push(sub(
            "token",
            "TokenRequest",
            Some(("authentication.k8s.io", "v1")),
            &["create"],
        )),
        ("", "namespaces") => out.push(sub("finalize", "Namespace", None, &["update"])),
        (crate::certificates::GROUP, crate::certificates::RESOURCE) => {
            out.push(sub("approval", &t.kind, None, GET_PATCH_UPDATE));
        }
        _ => {}
    }
    if !t.is_custom() {
        out.sort_by_key(|s| s.name);
    }
    out
}

/// `discovery.StorageVersionHash` of a stored resource: the first 8 bytes of the SHA-256
/// of `group/version/kind` in its storage version (or what it is encoded as), in base64. Reviews, stored nowhere,
/// have none.
pub fn storage_version_hash(t: &ResourceType) -> Option<String> {
    use base64::Engine as _;
    if matches!(t.backing, Backing::Virtual | Backing::Health) {
        return None;
    }
    let gvk = match t.encoded_as {
        Some(gvk) => gvk.to_string(),
        None => format!("{}/{}/{}", t.group, t.storage_version(), t.kind),
    };
    let digest = ring::digest::digest(&ring::digest::SHA256, gvk.as_bytes());
    Some(base64::engine::general_purpose::STANDARD.encode(&digest.as_ref()[..8]))
}

fn resource_entries(t: &ResourceType) -> Vec<Value> {
    let mut main = json!({
        "name": t.resource,
        "singularName": singular(t),
        "namespaced": t.namespaced,
        "kind": t.kind,
        "verbs": verbs(t),
    });
    if !t.short_names.is_empty() {
        main["shortNames"] = json!(t.short_names);
    }
    if !t.categories.is_empty() {
        main["categories"] = json!(t.categories);
    }
    if let Some(hash) = storage_version_hash(t) {
        main["storageVersionHash"] = json!(hash);
    }
    let mut out = vec![main];
    for s in subresources(t) {
        let mut e = json!({
            "name": format!("{}/{}", t.resource, s.name),
            "singularName": "",
            "namespaced": t.namespaced,
            "kind": s.kind,
            "verbs": s.verbs,
        });
        if let Some((g, v)) = s.group_version {
            e["group"] = json!(g);
            e["version"] = json!(v);
        }
        out.push(e);
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
    let mut list = json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": gv,
        "resources": types.iter().flat_map(|t| resource_entries(t)).collect::<Vec<_>>(),
    });
    if group.is_empty() {
        // kube-apiserver's `/api/v1` names no apiVersion; every group's list does.
        if let Some(fields) = list.as_object_mut() {
            fields.remove("apiVersion");
        }
    }
    Some(list)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_storage_version_hash_is_that_of_kube_apiserver() {
        let r = Registry::new();
        let hash = |group, version, resource| {
            storage_version_hash(r.lookup(group, version, resource).unwrap())
        };
        // As kube-apiserver 1.34 lists them in /api/v1.
        assert_eq!(hash("", "v1", "pods").as_deref(), Some("xPOwRZ+Yhw8="));
        assert_eq!(hash("", "v1", "nodes").as_deref(), Some("XwShjMxG9Fs="));
        assert_eq!(
            hash("authorization.k8s.io", "v1", "selfsubjectaccessreviews"),
            None
        );
    }

    #[test]
    fn certificate_signing_requests_announce_approval_and_status() {
        let r = Registry::new();
        let csrs = r
            .lookup("certificates.k8s.io", "v1", "certificatesigningrequests")
            .unwrap();
        let subresources: Vec<(&str, &[&str])> = subresources(csrs)
            .iter()
            .map(|s| (s.name, s.verbs))
            .collect();
        assert_eq!(
            subresources,
            [("approval", GET_PATCH_UPDATE), ("status", GET_PATCH_UPDATE)]
        );
        assert_eq!(csrs.short_names, ["csr"]);
        assert!(!csrs.namespaced);
    }

    #[test]
    fn pods_announce_the_connect_subresources_in_name_order() {
        let r = Registry::new();
        let names: Vec<&str> = subresources(r.lookup("", "v1", "pods").unwrap())
            .iter()
            .map(|s| s.name)
            .collect();
        assert_eq!(
            names,
            [
                "attach",
                "binding",
                "ephemeralcontainers",
                "eviction",
                "exec",
                "log",
                "portforward",
                "proxy",
                "resize",
                "status"
            ]
        );
    }
}

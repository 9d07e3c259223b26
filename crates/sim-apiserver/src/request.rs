//! What a request asks for: the path parsed as kube-apiserver's RequestInfoFactory parses
//! it (group, version, namespace, resource, name, subresource, verb) and its query.

use std::collections::HashMap;

use hyper::Method;

/// A parsed request path.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestInfo {
    /// Whether the path names a resource (else discovery, openapi, health…).
    pub resource_request: bool,
    /// RBAC verb.
    pub verb: String,
    /// API group ("" for core).
    pub group: String,
    /// API version.
    pub version: String,
    /// Namespace, if any.
    pub namespace: String,
    /// Plural resource.
    pub resource: String,
    /// Object name, if any.
    pub name: String,
    /// Subresource, if any.
    pub subresource: String,
    /// The path.
    pub path: String,
    /// For `pods/proxy`: the path on the pod (`/metrics`), from the segments after `proxy`.
    pub proxy_path: String,
}

impl RequestInfo {
    /// The request as a fault log reads it: `get deployments default/cache`.
    pub fn summary(&self) -> String {
        let resource = if self.subresource.is_empty() {
            self.resource.clone()
        } else {
            format!("{}/{}", self.resource, self.subresource)
        };
        let object = match (self.namespace.as_str(), self.name.as_str()) {
            ("", name) => name.to_string(),
            (ns, "") => format!("in {ns}"),
            (ns, name) => format!("{ns}/{name}"),
        };
        format!("{} {resource} {object}", self.verb)
            .trim_end()
            .to_string()
    }
}

/// Query parameters (the last value of each wins, as in url.Values.Get).
#[derive(Debug, Clone, Default)]
pub struct Query {
    values: HashMap<String, String>,
}

impl Query {
    /// Parses a query string; tolerates kube-rs's leading `&`.
    pub fn parse(query: Option<&str>) -> Self {
        let values = query
            .map(|q| {
                form_urlencoded::parse(q.as_bytes())
                    .filter(|(k, _)| !k.is_empty())
                    .map(|(k, v)| (k.into_owned(), v.into_owned()))
                    .collect()
            })
            .unwrap_or_default();
        Self { values }
    }

    /// A parameter, if present.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.values.get(key).map(String::as_str)
    }

    /// A parameter, or "" when absent.
    pub fn str(&self, key: &str) -> &str {
        self.get(key).unwrap_or("")
    }

    /// A boolean parameter (`true`/`1`).
    pub fn flag(&self, key: &str) -> bool {
        matches!(self.get(key), Some("true" | "1"))
    }
}

/// Parses `path` with `method` and whether the query asks to watch.
pub fn parse(method: &Method, path: &str, query: &Query) -> RequestInfo {
    let mut info = RequestInfo {
        path: path.to_string(),
        ..Default::default()
    };
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let mut rest: &[&str] = match parts.as_slice() {
        ["api", version, rest @ ..] => {
            info.version = version.to_string();
            rest
        }
        ["apis", group, version, rest @ ..] => {
            info.group = group.to_string();
            info.version = version.to_string();
            rest
        }
        _ => {
            info.verb = method.as_str().to_lowercase();
            return info;
        }
    };
    if rest.is_empty() {
        info.verb = method.as_str().to_lowercase();
        return info;
    }
    info.resource_request = true;
    let mut watch = query.flag("watch");
    if rest.first() == Some(&"watch") {
        watch = true;
        rest = &rest[1..];
    }
    if rest.first() == Some(&"namespaces") && rest.len() > 1 {
        info.namespace = rest[1].to_string();
        if rest.len() > 2 && !matches!(rest[2], "status" | "finalize") {
            rest = &rest[2..];
        }
    }
    info.resource = rest.first().unwrap_or(&"").to_string();
    info.name = rest.get(1).unwrap_or(&"").to_string();
    info.subresource = rest.get(2).unwrap_or(&"").to_string();
    if info.subresource == "proxy" {
        info.proxy_path = format!("/{}", rest.get(3..).unwrap_or_default().join("/"));
    } else if rest.len() > 3 {
        // Deeper paths are not served; keep the remainder visible in the subresource.
        info.subresource = rest[2..].join("/");
    }
    info.verb = match *method {
        Method::GET | Method::HEAD if watch => "watch",
        Method::GET | Method::HEAD if info.name.is_empty() => "list",
        Method::GET | Method::HEAD => "get",
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE if info.name.is_empty() => "deletecollection",
        Method::DELETE => "delete",
        _ => "",
    }
    .to_string();
    info
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(method: Method, path: &str, q: &str) -> RequestInfo {
        parse(&method, path, &Query::parse(Some(q)))
    }

    #[test]
    fn a_namespaced_core_object_path_parses_into_its_parts() {
        let i = p(Method::GET, "/api/v1/namespaces/ns/pods/p/status", "");
        assert_eq!(
            (
                i.verb.as_str(),
                i.namespace.as_str(),
                i.resource.as_str(),
                i.name.as_str(),
                i.subresource.as_str()
            ),
            ("get", "ns", "pods", "p", "status")
        );
    }

    #[test]
    fn a_request_summary_names_the_verb_resource_and_object() {
        let get = p(
            Method::GET,
            "/apis/apps/v1/namespaces/ns/deployments/web",
            "",
        );
        assert_eq!(get.summary(), "get deployments ns/web");
        let status = p(Method::PATCH, "/api/v1/namespaces/ns/pods/p/status", "");
        assert_eq!(status.summary(), "patch pods/status ns/p");
        let list = p(Method::GET, "/api/v1/namespaces/ns/pods", "");
        assert_eq!(list.summary(), "list pods in ns");
        let nodes = p(Method::GET, "/api/v1/nodes", "");
        assert_eq!(nodes.summary(), "list nodes");
    }

    #[test]
    fn a_namespace_itself_is_the_namespaces_resource() {
        let i = p(Method::DELETE, "/api/v1/namespaces/ns", "");
        assert_eq!(
            (i.verb.as_str(), i.resource.as_str(), i.name.as_str()),
            ("delete", "namespaces", "ns")
        );
        let i = p(Method::PUT, "/api/v1/namespaces/ns/finalize", "");
        assert_eq!(
            (i.resource.as_str(), i.subresource.as_str()),
            ("namespaces", "finalize")
        );
    }

    #[test]
    fn kube_rs_queries_with_a_leading_ampersand_parse() {
        let i = p(
            Method::GET,
            "/apis/coordination.k8s.io/v1/leases",
            "&watch=true&resourceVersion=5",
        );
        assert_eq!(i.verb, "watch");
        assert_eq!(i.group, "coordination.k8s.io");
        assert!(i.namespace.is_empty());
    }

    #[test]
    fn the_legacy_watch_prefix_means_watch() {
        let i = p(Method::GET, "/api/v1/watch/namespaces/ns/configmaps", "");
        assert_eq!(
            (i.verb.as_str(), i.resource.as_str(), i.namespace.as_str()),
            ("watch", "configmaps", "ns")
        );
    }

    #[test]
    fn discovery_paths_are_not_resource_requests() {
        assert!(!p(Method::GET, "/apis/apps/v1", "").resource_request);
        assert!(!p(Method::GET, "/version", "").resource_request);
    }

    #[test]
    fn a_pod_proxy_path_keeps_the_path_on_the_pod() {
        let i = parse(
            &Method::GET,
            "/api/v1/namespaces/ns/pods/web-1:8080/proxy/metrics",
            &Query::default(),
        );
        assert_eq!(
            (
                i.resource.as_str(),
                i.name.as_str(),
                i.subresource.as_str(),
                i.proxy_path.as_str(),
                i.verb.as_str()
            ),
            ("pods", "web-1:8080", "proxy", "/metrics", "get")
        );
    }
}

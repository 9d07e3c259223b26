//! Aggregated discovery (`apidiscovery.k8s.io/v2`): `/api` and `/apis` answered with an
//! `APIGroupDiscoveryList` (every group, version and resource in one document) when the
//! `Accept` header asks for it, as kube-apiserver's `discovery/aggregated` handler does:
//! the header's media ranges are tried by quality, and the first one the server can serve
//! decides, so a client listing the aggregated form first with the plain one as fallback
//! gets the aggregated form.

use serde_json::{Value, json};

use super::discovery::{self, Subresource};
use super::registry::{Registry, ResourceType};

/// The `Content-Type` of an aggregated answer in JSON.
pub const CONTENT_TYPE: &str =
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

/// The `Content-Type` of an aggregated answer in YAML.
pub const CONTENT_TYPE_YAML: &str =
    "application/yaml;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

/// The form an `Accept` header selects for `/api` and `/apis`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    /// `APIVersions` / `APIGroupList`.
    Plain,
    /// `APIGroupDiscoveryList` in JSON.
    AggregatedJson,
    /// `APIGroupDiscoveryList` in YAML.
    AggregatedYaml,
}

/// One media range of an `Accept` header.
struct Clause<'a> {
    media: &'a str,
    subtype: &'a str,
    quality: f64,
    params: Vec<(&'a str, &'a str)>,
}

/// Parses an `Accept` header as goautoneg does: ranges by quality, a concrete type before
/// `*` and a concrete subtype before `*` at equal quality, otherwise in the header's order.
fn clauses(accept: &str) -> Vec<Clause<'_>> {
    let mut out: Vec<Clause<'_>> = accept
        .split(',')
        .filter_map(|part| {
            let mut pieces = part.split(';');
            let range = pieces.next()?.trim();
            let (media, subtype) = match range.split_once('/') {
                Some((m, s)) => (m.trim(), s.trim()),
                None if range == "*" => ("*", "*"),
                None => return None,
            };
            let mut quality = 1.0;
            let mut params = Vec::new();
            for p in pieces {
                let (k, v) = p.split_once('=').unwrap_or((p, ""));
                let (k, v) = (k.trim(), v.trim());
                if k == "q" {
                    quality = v.parse().unwrap_or(0.0);
                } else if !k.is_empty() {
                    params.push((k, v));
                }
            }
            Some(Clause {
                media,
                subtype,
                quality,
                params,
            })
        })
        .collect();
    let specificity = |c: &Clause<'_>| (c.media == "*", c.subtype == "*");
    out.sort_by(|a, b| {
        b.quality
            .partial_cmp(&a.quality)
            .unwrap_or(std::cmp::Ordering::Equal)
            .then_with(|| specificity(a).cmp(&specificity(b)))
    });
    out
}

/// What an `Accept` header selects (`NegotiateMediaTypeOptions` with the discovery
/// endpoint's restrictions): the first range the server serves whose parameters it accepts.
/// A conversion (`as`, `g`, `v`) is accepted only to `apidiscovery.k8s.io/v2`
/// `APIGroupDiscoveryList`; protobuf is not served here, so a range asking for it is passed
/// over for the next.
pub fn negotiate(accept: Option<&str>) -> Form {
    let Some(accept) = accept.filter(|a| !a.trim().is_empty()) else {
        return Form::Plain;
    };
    for clause in clauses(accept) {
        for (subtype, form) in [
            ("json", Form::AggregatedJson),
            ("yaml", Form::AggregatedYaml),
        ] {
            let fits = (clause.media == "application" || clause.media == "*")
                && (clause.subtype == subtype || clause.subtype == "*");
            if !fits {
                continue;
            }
            let (mut group, mut version, mut kind) = (None, None, None);
            let mut acceptable = true;
            for (k, v) in &clause.params {
                match *k {
                    "g" => group = Some(*v),
                    "v" => version = Some(*v),
                    "as" => kind = Some(*v),
                    "sv" if !v.is_empty() => acceptable = false,
                    "stream" if !v.is_empty() && *v != "watch" => acceptable = false,
                    _ => {}
                }
            }
            if !acceptable {
                continue;
            }
            match (group, version, kind) {
                (None, None, None) => return Form::Plain,
                (Some("apidiscovery.k8s.io"), Some("v2"), Some("APIGroupDiscoveryList")) => {
                    return form;
                }
                _ => continue,
            }
        }
    }
    Form::Plain
}

fn response_kind(group: &str, version: &str, kind: &str) -> Value {
    json!({"group": group, "version": version, "kind": kind})
}

/// One resource of a group version: built-in resources name their own kind with an empty
/// group and version, custom resources with theirs.
fn resource(t: &ResourceType, version: &str) -> Value {
    let (group, own_version) = if t.is_custom() {
        (t.group.as_str(), version)
    } else {
        ("", "")
    };
    let mut entry = json!({
        "resource": t.resource,
        "responseKind": response_kind(group, own_version, &t.kind),
        "scope": if t.namespaced { "Namespaced" } else { "Cluster" },
        "singularResource": discovery::singular(t),
        "verbs": discovery::verbs(t),
    });
    if !t.short_names.is_empty() {
        entry["shortNames"] = json!(t.short_names);
    }
    if !t.categories.is_empty() {
        entry["categories"] = json!(t.categories);
    }
    let subresources: Vec<Value> = discovery::subresources(t)
        .iter()
        .map(|s: &Subresource| {
            let kind = match s.group_version {
                Some((g, v)) => response_kind(g, v, &s.kind),
                None => response_kind(group, own_version, &s.kind),
            };
            json!({"subresource": s.name, "responseKind": kind, "verbs": s.verbs})
        })
        .collect();
    if !subresources.is_empty() {
        entry["subresources"] = json!(subresources);
    }
    entry
}

/// The versions of one group, in discovery order, each with its resources by name.
fn versions(registry: &Registry, group: &str, versions: &[String]) -> Vec<Value> {
    let mut versions = versions.to_vec();
    versions.sort_by(|a, b| discovery::kube_aware_order(a, b));
    versions
        .iter()
        .map(|v| {
            let mut types: Vec<&ResourceType> = registry
                .all()
                .filter(|t| t.group == group && t.versions.contains(v))
                .collect();
            types.sort_by(|a, b| a.resource.cmp(&b.resource));
            json!({
                "version": v,
                "resources": types.iter().map(|t| resource(t, v)).collect::<Vec<_>>(),
                "freshness": "Current",
            })
        })
        .collect()
}

fn list(items: Vec<Value>) -> Value {
    json!({
        "kind": "APIGroupDiscoveryList",
        "apiVersion": "apidiscovery.k8s.io/v2",
        "metadata": {},
        "items": items,
    })
}

/// `GET /api` in the aggregated form: the core group, unnamed.
pub fn core(registry: &Registry) -> Value {
    list(vec![json!({
        "metadata": {},
        "versions": versions(registry, "", &["v1".to_string()]),
    })])
}

/// `GET /apis` in the aggregated form: every other group, by priority.
pub fn groups(registry: &Registry) -> Value {
    list(
        discovery::groups(registry)
            .iter()
            .map(|(group, v)| {
                json!({
                    "metadata": {"name": group},
                    "versions": versions(registry, group, v),
                })
            })
            .collect(),
    )
}

/// The `ETag` of an answer, as kube-apiserver computes it (`aggregated/etag.go`): the
/// SHA-512 of the JSON document in upper-case hex, quoted. The simulator hashes its own
/// serialization, so the value matches the real server's only for the same bytes.
pub fn etag(body: &[u8]) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA512, body);
    let hex: String = digest.as_ref().iter().map(|b| format!("{b:02X}")).collect();
    format!("\"{hex}\"")
}

#[cfg(test)]
mod tests {
    use super::*;

    const KUBECTL: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";

    #[test]
    fn the_etag_is_the_quoted_upper_case_sha512_of_the_document() {
        // sha512("") from FIPS 180-2's test vectors.
        let empty = "CF83E1357EEFB8BDF1542850D66D8007D620E4050B5715DC83F4A921D36CE9CE47D0D13C5D85F2B0FF8318D2877EEC2F63B931BD47417A81A538327AF927DA3E";
        assert_eq!(etag(b""), format!("\"{empty}\""));
        assert_ne!(etag(b"{}"), etag(b"[]"));
    }

    #[test]
    fn the_aggregated_form_is_chosen_only_when_asked_for_first() {
        assert_eq!(negotiate(Some(KUBECTL)), Form::AggregatedJson);
        assert_eq!(negotiate(None), Form::Plain);
        assert_eq!(negotiate(Some("application/json")), Form::Plain);
        assert_eq!(negotiate(Some("*/*")), Form::Plain);
        assert_eq!(
            negotiate(Some(
                "application/json,application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
            )),
            Form::Plain
        );
    }

    #[test]
    fn quality_and_unservable_ranges_decide_the_form() {
        assert_eq!(
            negotiate(Some(
                "application/json;q=0.9,application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
            )),
            Form::AggregatedJson
        );
        assert_eq!(
            negotiate(Some(
                "application/vnd.kubernetes.protobuf;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json"
            )),
            Form::AggregatedJson
        );
        assert_eq!(
            negotiate(Some(
                "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json"
            )),
            Form::Plain,
            "v2beta1 is no longer served"
        );
        assert_eq!(
            negotiate(Some(
                "application/yaml;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
            )),
            Form::AggregatedYaml
        );
        assert_eq!(
            negotiate(Some("application/json;as=Table;v=v1;g=meta.k8s.io")),
            Form::Plain
        );
    }

    #[test]
    fn odd_accept_headers_never_panic() {
        for accept in [",", ";", "a", "*", "application/json;q=x", "/;=", ";;;q=1"] {
            let _ = negotiate(Some(accept));
        }
    }

    #[test]
    fn every_group_lists_its_resources_with_kind_scope_and_subresources() {
        let registry = Registry::new();
        let apis = groups(&registry);
        assert_eq!(apis["kind"], "APIGroupDiscoveryList");
        let names: Vec<&str> = apis["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|g| g["metadata"]["name"].as_str())
            .collect();
        assert_eq!(names[..2], ["apiregistration.k8s.io", "apps"]);
        let apps = &apis["items"][1]["versions"][0];
        assert_eq!(apps["freshness"], "Current");
        // controllerrevisions, daemonsets, then deployments.
        let deployments = &apps["resources"][2];
        assert_eq!(deployments["resource"], "deployments");
        assert_eq!(
            deployments["responseKind"],
            json!({"group": "", "version": "", "kind": "Deployment"})
        );
        assert_eq!(deployments["scope"], "Namespaced");
        assert_eq!(deployments["subresources"][0]["subresource"], "scale");
        assert_eq!(
            deployments["subresources"][0]["responseKind"],
            json!({"group": "autoscaling", "version": "v1", "kind": "Scale"})
        );
        let api = core(&registry);
        assert_eq!(api["items"][0]["metadata"], json!({}));
        assert_eq!(api["items"][0]["versions"][0]["version"], "v1");
    }
}

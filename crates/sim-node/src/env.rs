//! A container's environment and argv as the kubelet builds them: `envFrom` and `env` with
//! Downward API fields and ConfigMap/Secret keys resolved, and `$(VAR)` expansion.

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::{Container, Pod};

/// Errors resolving a container's environment. The messages are the kubelet's, as
/// `CreateContainerConfigError` shows them.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnvError {
    /// A referenced ConfigMap does not exist.
    #[error("configmap {0:?} not found")]
    NoConfigMap(String),
    /// A referenced Secret does not exist.
    #[error("secret {0:?} not found")]
    NoSecret(String),
    /// A referenced key is not in its ConfigMap or Secret.
    #[error("couldn't find key {key} in {kind} {namespace}/{name}")]
    NoKey {
        /// `ConfigMap` or `Secret`.
        kind: &'static str,
        /// Namespace.
        namespace: String,
        /// Object name.
        name: String,
        /// The key.
        key: String,
    },
    /// A `fieldRef` names a field the Downward API does not offer.
    #[error("unsupported fieldPath: {0}")]
    FieldPath(String),
    /// A `resourceFieldRef` names an unsupported resource or has a bad quantity.
    #[error("unsupported resource field {resource}: {detail}")]
    ResourceField {
        /// The resource, e.g. `limits.cpu`.
        resource: String,
        /// What is wrong.
        detail: String,
    },
}

/// The data of the ConfigMaps and Secrets a container refers to, fetched beforehand
/// (Secret values decoded). Absent objects are simply missing from the maps.
#[derive(Debug, Clone, Default)]
pub struct Sources {
    /// ConfigMap name → data (binaryData included as lossy text).
    pub config_maps: HashMap<String, BTreeMap<String, String>>,
    /// Secret name → decoded data.
    pub secrets: HashMap<String, BTreeMap<String, String>>,
}

/// Which object kinds a container refers to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SourceKind {
    /// A ConfigMap.
    ConfigMap,
    /// A Secret.
    Secret,
}

/// The ConfigMaps and Secrets `container` refers to in `env` and `envFrom`.
pub fn references(container: &Container) -> Vec<(SourceKind, String)> {
    let mut refs = Vec::new();
    for from in container.env_from.iter().flatten() {
        if let Some(cm) = &from.config_map_ref {
            refs.push((SourceKind::ConfigMap, cm.name.clone()));
        }
        if let Some(s) = &from.secret_ref {
            refs.push((SourceKind::Secret, s.name.clone()));
        }
    }
    for var in container.env.iter().flatten() {
        let Some(from) = &var.value_from else {
            continue;
        };
        if let Some(k) = &from.config_map_key_ref {
            refs.push((SourceKind::ConfigMap, k.name.clone()));
        }
        if let Some(k) = &from.secret_key_ref {
            refs.push((SourceKind::Secret, k.name.clone()));
        }
    }
    refs.sort();
    refs.dedup();
    refs
}

/// What the Downward API can tell about a running pod.
pub struct PodFacts<'a> {
    /// The pod.
    pub pod: &'a Pod,
    /// Its IP.
    pub pod_ip: String,
    /// The node's IP.
    pub host_ip: String,
    /// The node's allocatable resources (for `resourceFieldRef` limits that are not set).
    pub allocatable: &'a [(&'a str, &'a str)],
}

/// An ordered environment where later definitions replace earlier ones in place.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Env {
    vars: Vec<(String, String)>,
}

impl Env {
    /// An empty environment.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets `name`, keeping its first position when it is already defined.
    pub fn set(&mut self, name: &str, value: impl Into<String>) {
        let value = value.into();
        match self.vars.iter_mut().find(|(n, _)| n == name) {
            Some(slot) => slot.1 = value,
            None => self.vars.push((name.to_string(), value)),
        }
    }

    /// The value of `name`.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.vars
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The variables in order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.vars.iter().map(|(n, v)| (n.as_str(), v.as_str()))
    }

    /// Expands `$(VAR)` references in `input` with this environment.
    pub fn expand(&self, input: &str) -> String {
        expand(input, |name| self.get(name).map(str::to_string))
    }
}

/// Kubernetes' `$(VAR)` expansion: `$(NAME)` becomes the value of NAME when `lookup`
/// knows it and stays literal otherwise; `$$` is an escaped `$`; any other `$` is literal.
pub fn expand(input: &str, lookup: impl Fn(&str) -> Option<String>) -> String {
    let bytes = input.as_bytes();
    let mut out: Vec<u8> = Vec::with_capacity(bytes.len());
    let mut checkpoint = 0;
    let mut cursor = 0;
    while cursor < bytes.len() {
        if bytes[cursor] == b'$' && cursor + 1 < bytes.len() {
            out.extend_from_slice(&bytes[checkpoint..cursor]);
            let rest = &bytes[cursor + 1..];
            let advance = match rest[0] {
                b'$' => {
                    out.push(b'$');
                    1
                }
                b'(' => match rest.iter().position(|b| *b == b')') {
                    Some(close) => {
                        let name = String::from_utf8_lossy(&rest[1..close]);
                        match lookup(&name) {
                            Some(v) => out.extend_from_slice(v.as_bytes()),
                            None => {
                                out.extend_from_slice(b"$(");
                                out.extend_from_slice(name.as_bytes());
                                out.push(b')');
                            }
                        }
                        close + 1
                    }
                    None => {
                        out.extend_from_slice(b"$(");
                        1
                    }
                },
                other => {
                    out.push(b'$');
                    out.push(other);
                    1
                }
            };
            cursor += advance;
            checkpoint = cursor + 1;
        }
        cursor += 1;
    }
    if checkpoint < bytes.len() {
        out.extend_from_slice(&bytes[checkpoint..]);
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The value of a Downward API `fieldRef` (env vars and downwardAPI volumes alike).
pub(crate) fn field_value(path: &str, facts: &PodFacts<'_>) -> Result<String, EnvError> {
    let meta = &facts.pod.metadata;
    let spec = facts.pod.spec.as_ref();
    let keyed = |prefix: &str, map: Option<&BTreeMap<String, String>>| -> Option<String> {
        let key = path
            .strip_prefix(prefix)?
            .strip_prefix("['")?
            .strip_suffix("']")?;
        Some(map.and_then(|m| m.get(key)).cloned().unwrap_or_default())
    };
    let value = match path {
        "metadata.name" => meta.name.clone().unwrap_or_default(),
        "metadata.namespace" => meta.namespace.clone().unwrap_or_default(),
        "metadata.uid" => meta.uid.clone().unwrap_or_default(),
        "spec.nodeName" => spec.and_then(|s| s.node_name.clone()).unwrap_or_default(),
        "spec.serviceAccountName" => spec
            .and_then(|s| s.service_account_name.clone())
            .unwrap_or_default(),
        "status.podIP" | "status.podIPs" => facts.pod_ip.clone(),
        "status.hostIP" | "status.hostIPs" => facts.host_ip.clone(),
        "metadata.labels" => go_map(meta.labels.as_ref()),
        "metadata.annotations" => go_map(meta.annotations.as_ref()),
        _ => keyed("metadata.labels", meta.labels.as_ref())
            .or_else(|| keyed("metadata.annotations", meta.annotations.as_ref()))
            .ok_or_else(|| EnvError::FieldPath(path.to_string()))?,
    };
    Ok(value)
}

/// The Downward API's rendering of a label or annotation map (`key="value"` lines).
fn go_map(map: Option<&BTreeMap<String, String>>) -> String {
    map.into_iter()
        .flatten()
        .map(|(k, v)| format!("{k}={v:?}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A Kubernetes quantity as a number (`500m` → 0.5, `1Gi` → 1073741824), surrounding
/// blanks ignored: the API server's reading ([`sim_apiserver::objects::quantity`]).
pub fn parse_quantity(q: &str) -> Option<f64> {
    sim_apiserver::objects::quantity(q.trim())
}

/// The value of a Downward API `resourceFieldRef` of `container` (env vars and
/// downwardAPI volumes alike): limits not set fall back to the node's allocatable.
pub(crate) fn resource_value(
    container: &Container,
    resource: &str,
    divisor: Option<&str>,
    facts: &PodFacts<'_>,
) -> Result<String, EnvError> {
    let bad = |detail: &str| EnvError::ResourceField {
        resource: resource.to_string(),
        detail: detail.to_string(),
    };
    let (kind, name) = resource
        .split_once('.')
        .ok_or_else(|| bad("expected limits.NAME or requests.NAME"))?;
    let resources = container.resources.as_ref();
    let set = match kind {
        "limits" => resources.and_then(|r| r.limits.as_ref()),
        "requests" => resources.and_then(|r| r.requests.as_ref()),
        _ => return Err(bad("expected limits.NAME or requests.NAME")),
    };
    let quantity = set.and_then(|m| m.get(name)).map(|q| q.0.clone());
    let quantity = match (quantity, kind) {
        (Some(q), _) => q,
        (None, "limits") => facts
            .allocatable
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| (*v).to_string())
            .ok_or_else(|| bad("no such resource on the node"))?,
        (None, _) => "0".to_string(),
    };
    let value = parse_quantity(&quantity).ok_or_else(|| bad("unparsable quantity"))?;
    let divisor = parse_quantity(divisor.unwrap_or("1")).ok_or_else(|| bad("bad divisor"))?;
    if divisor <= 0.0 {
        return Err(bad("divisor must be positive"));
    }
    Ok(format!("{}", (value / divisor).ceil() as i64))
}

/// Builds the environment of `container`: `base` first (the kubelet's own variables,
/// which the container may override), then `envFrom`, then `env` with `$(VAR)` expansion
/// against everything defined before it.
///
/// # Errors
/// When a referenced ConfigMap, Secret or key is missing (and the reference is not
/// optional), or a `fieldRef`/`resourceFieldRef` is unsupported.
pub fn container_env(
    container: &Container,
    facts: &PodFacts<'_>,
    sources: &Sources,
    base: &Env,
) -> Result<Env, EnvError> {
    let namespace = facts.pod.metadata.namespace.clone().unwrap_or_default();
    let mut env = base.clone();
    for from in container.env_from.iter().flatten() {
        let prefix = from.prefix.clone().unwrap_or_default();
        let data = if let Some(r) = &from.config_map_ref {
            match sources.config_maps.get(&r.name) {
                Some(d) => Some(d),
                None if r.optional == Some(true) => None,
                None => return Err(EnvError::NoConfigMap(r.name.clone())),
            }
        } else if let Some(r) = &from.secret_ref {
            match sources.secrets.get(&r.name) {
                Some(d) => Some(d),
                None if r.optional == Some(true) => None,
                None => return Err(EnvError::NoSecret(r.name.clone())),
            }
        } else {
            None
        };
        for (k, v) in data.into_iter().flatten() {
            let name = format!("{prefix}{k}");
            // Keys that are not valid variable names are skipped, as the kubelet does.
            if is_env_name(&name) {
                env.set(&name, v.clone());
            }
        }
    }
    for var in container.env.iter().flatten() {
        let value = if let Some(from) = &var.value_from {
            if let Some(f) = &from.field_ref {
                Some(field_value(&f.field_path, facts)?)
            } else if let Some(r) = &from.resource_field_ref {
                Some(resource_value(
                    container,
                    &r.resource,
                    r.divisor.as_ref().map(|d| d.0.as_str()),
                    facts,
                )?)
            } else if let Some(k) = &from.config_map_key_ref {
                key_value(
                    "ConfigMap",
                    &namespace,
                    &k.name,
                    &k.key,
                    k.optional,
                    sources.config_maps.get(&k.name),
                )?
            } else if let Some(k) = &from.secret_key_ref {
                key_value(
                    "Secret",
                    &namespace,
                    &k.name,
                    &k.key,
                    k.optional,
                    sources.secrets.get(&k.name),
                )?
            } else {
                Some(String::new())
            }
        } else {
            Some(env.expand(var.value.as_deref().unwrap_or_default()))
        };
        if let Some(value) = value {
            env.set(&var.name, value);
        }
    }
    Ok(env)
}

fn key_value(
    kind: &'static str,
    namespace: &str,
    name: &str,
    key: &str,
    optional: Option<bool>,
    data: Option<&BTreeMap<String, String>>,
) -> Result<Option<String>, EnvError> {
    let optional = optional == Some(true);
    match data {
        None if optional => Ok(None),
        None if kind == "Secret" => Err(EnvError::NoSecret(name.to_string())),
        None => Err(EnvError::NoConfigMap(name.to_string())),
        Some(d) => match d.get(key) {
            Some(v) => Ok(Some(v.clone())),
            None if optional => Ok(None),
            None => Err(EnvError::NoKey {
                kind,
                namespace: namespace.to_string(),
                name: name.to_string(),
                key: key.to_string(),
            }),
        },
    }
}

fn is_env_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

/// The argv after the executable: `command[1..]` (the image's executable stands in for
/// `command[0]`) then `args`, each with `$(VAR)` expanded from `env`.
pub fn container_args(container: &Container, env: &Env) -> Vec<String> {
    let command = container.command.iter().flatten().skip(1);
    command
        .chain(container.args.iter().flatten())
        .map(|a| env.expand(a))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn lookup(name: &str) -> Option<String> {
        match name {
            "A" => Some("alpha".into()),
            "EMPTY" => Some(String::new()),
            _ => None,
        }
    }

    #[test]
    fn expansion_follows_the_kubernetes_rules() {
        let cases = [
            ("$(A)", "alpha"),
            ("x$(A)y", "xalphay"),
            ("$(A)$(A)", "alphaalpha"),
            ("$$(A)", "$(A)"),
            ("$$$(A)", "$alpha"),
            ("$(UNKNOWN)", "$(UNKNOWN)"),
            ("$(EMPTY)!", "!"),
            ("$A", "$A"),
            ("$", "$"),
            ("a$", "a$"),
            ("$(A", "$(A"),
            ("$()", "$()"),
            ("no refs", "no refs"),
            ("ü$(A)ü", "üalphaü"),
        ];
        for (input, want) in cases {
            assert_eq!(expand(input, lookup), want, "expanding {input:?}");
        }
    }

    fn pod() -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u-1", "labels": {"app": "x"}},
            "spec": {"nodeName": "n1", "serviceAccountName": "sa", "containers": [{
                "name": "c", "image": "i",
                "command": ["/manager", "--first"],
                "args": ["--name=$(POD_NAME)", "$$(POD_NAME)", "$(NOPE)"],
                "resources": {"limits": {"memory": "64Mi"}},
                "envFrom": [{"configMapRef": {"name": "cm"}, "prefix": "CM_"}],
                "env": [
                    {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                    {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                    {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
                    {"name": "SA", "valueFrom": {"fieldRef": {"fieldPath": "spec.serviceAccountName"}}},
                    {"name": "GREETING", "value": "hi $(POD_NAME) from $(CM_k)"},
                    {"name": "FROM_SECRET", "valueFrom": {"secretKeyRef": {"name": "s", "key": "pw"}}},
                    {"name": "MEM_MI", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}}},
                    {"name": "CPUS", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}},
                    {"name": "OPT", "valueFrom": {"configMapKeyRef": {"name": "missing", "key": "k", "optional": true}}}
                ]
            }]}
        }))
        .unwrap()
    }

    #[test]
    fn env_resolves_downward_api_sources_and_expansion() {
        let pod = pod();
        let container = &pod.spec.as_ref().unwrap().containers[0];
        let facts = PodFacts {
            pod: &pod,
            pod_ip: "127.101.0.1".into(),
            host_ip: "127.0.10.1".into(),
            allocatable: &[("cpu", "8")],
        };
        let mut sources = Sources::default();
        sources
            .config_maps
            .insert("cm".into(), BTreeMap::from([("k".into(), "v".into())]));
        sources.secrets.insert(
            "s".into(),
            BTreeMap::from([("pw".into(), "hunter2".into())]),
        );
        let mut base = Env::new();
        base.set("KUBECONFIG", "/x/kubeconfig");
        let env = container_env(container, &facts, &sources, &base).unwrap();
        assert_eq!(env.get("KUBECONFIG"), Some("/x/kubeconfig"));
        assert_eq!(env.get("CM_k"), Some("v"));
        assert_eq!(env.get("POD_NAME"), Some("p"));
        assert_eq!(env.get("POD_IP"), Some("127.101.0.1"));
        assert_eq!(env.get("APP"), Some("x"));
        assert_eq!(env.get("SA"), Some("sa"));
        assert_eq!(env.get("GREETING"), Some("hi p from v"));
        assert_eq!(env.get("FROM_SECRET"), Some("hunter2"));
        assert_eq!(env.get("MEM_MI"), Some("64"));
        assert_eq!(env.get("CPUS"), Some("8"));
        assert_eq!(env.get("OPT"), None);
        assert_eq!(
            container_args(container, &env),
            ["--first", "--name=p", "$(POD_NAME)", "$(NOPE)"]
        );
        assert_eq!(
            references(container),
            [
                (SourceKind::ConfigMap, "cm".to_string()),
                (SourceKind::ConfigMap, "missing".to_string()),
                (SourceKind::Secret, "s".to_string())
            ]
        );
    }

    #[test]
    fn missing_sources_fail_with_the_kubelets_messages() {
        let pod = pod();
        let container = &pod.spec.as_ref().unwrap().containers[0];
        let facts = PodFacts {
            pod: &pod,
            pod_ip: String::new(),
            host_ip: String::new(),
            allocatable: &[],
        };
        let err = container_env(container, &facts, &Sources::default(), &Env::new()).unwrap_err();
        assert_eq!(err.to_string(), "configmap \"cm\" not found");
        let mut sources = Sources::default();
        sources.config_maps.insert("cm".into(), BTreeMap::new());
        sources.secrets.insert("s".into(), BTreeMap::new());
        let err = container_env(container, &facts, &sources, &Env::new()).unwrap_err();
        assert_eq!(err.to_string(), "couldn't find key pw in Secret ns/s");
    }

    #[test]
    fn quantities_parse_with_their_suffixes() {
        assert_eq!(parse_quantity("500m"), Some(0.5));
        assert_eq!(parse_quantity("2"), Some(2.0));
        assert_eq!(parse_quantity("1Gi"), Some(1073741824.0));
        assert_eq!(parse_quantity("1k"), Some(1000.0));
        assert_eq!(parse_quantity("1e3"), Some(1000.0));
        assert_eq!(parse_quantity("x"), None);
    }
}

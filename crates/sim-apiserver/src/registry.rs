//! The resource types the server serves: built-in kinds and the custom resources of
//! Established CRDs, with the per-type rules (scope, subresources, update strategy) that
//! kube-apiserver's registry strategies encode.
//!
//! The two update rules follow the strategies of Kubernetes v1.34.4 (status subresources
//! embed the main strategy and inherit both): `AllowUnconditionalUpdate` is false only for
//! Leases (`pkg/registry/coordination/lease/strategy.go`), CustomResourceDefinitions and
//! their status (`apiextensions-apiserver/pkg/registry/customresourcedefinition/strategy.go`)
//! and custom resources and their status (`…/registry/customresource/strategy.go`,
//! `status_strategy.go`); `AllowCreateOnUpdate` is true only for Leases, Services
//! (`core/service`), Events of both groups (`core/event`, which `events.k8s.io` reuses) and
//! the four RBAC kinds (`rbac/{role,rolebinding,clusterrole,clusterrolebinding}`).
//! CertificateSigningRequests (`certificates/certificates`) take both defaults; what their
//! strategies and the `approval` subresource do is in [`super::certificates`].

use std::collections::BTreeMap;

use serde_json::Value;

use super::schema::Schema;
use super::status::GroupResource;

/// How `metadata.generation` moves on update.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GenerationRule {
    /// The type has no generation (ConfigMap, Lease).
    None,
    /// Bumped when `spec` changes (ReplicaSet, CRD, Pod since 1.33).
    Spec,
    /// Bumped when `spec` or annotations change (Deployment).
    SpecOrAnnotations,
    /// Bumped when anything outside `metadata` (and outside `status` when it is a
    /// subresource) changes: custom resources.
    AllButMetadata,
}

/// Where the scale subresource finds its fields (JSON paths without the leading dot).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScalePaths {
    /// `.spec.replicas` for built-ins.
    pub spec_replicas: String,
    /// `.status.replicas` for built-ins.
    pub status_replicas: String,
    /// `.status.selector` or none.
    pub label_selector: Option<String>,
}

/// What serves a resource.
#[derive(Debug, Clone)]
pub enum Backing {
    /// Stored objects of a built-in kind.
    Builtin,
    /// Stored custom resources; the schema of each served version.
    Custom {
        /// Name of the CRD that defines it.
        crd: String,
        /// Schema per version name.
        schemas: BTreeMap<String, Schema>,
        /// Printer columns of the storage version (for Table output).
        printer_columns: Vec<Value>,
    },
    /// Create-only review resources computed on the fly (access reviews).
    Virtual,
}

/// One served resource.
#[derive(Debug, Clone)]
pub struct ResourceType {
    /// API group (empty for core).
    pub group: String,
    /// Served versions; the first is the preferred and storage version.
    pub versions: Vec<String>,
    /// Plural name.
    pub resource: String,
    /// Singular name.
    pub singular: String,
    /// Kind.
    pub kind: String,
    /// Namespaced or cluster-scoped.
    pub namespaced: bool,
    /// Short names (`cm`, `deploy`).
    pub short_names: Vec<String>,
    /// Categories (`all`).
    pub categories: Vec<String>,
    /// Whether a `status` subresource exists.
    pub status: bool,
    /// The scale subresource, if any.
    pub scale: Option<ScalePaths>,
    /// PUT without a resourceVersion (or with `0`) overwrites the latest version
    /// (the strategy's `AllowUnconditionalUpdate`); otherwise it is refused with a 422.
    pub allow_unconditional_update: bool,
    /// PUT of an object that does not exist creates it (the strategy's
    /// `AllowCreateOnUpdate`); otherwise it is a 404.
    pub allow_create_on_update: bool,
    /// How generation moves.
    pub generation: GenerationRule,
    /// The `selectableFields` of each served version (custom resources; the built-in
    /// resources' fields are in [`super::selectors::SelectableFields`]), as field labels.
    pub selectable: BTreeMap<String, Vec<String>>,
    /// What backs it.
    pub backing: Backing,
}

impl ResourceType {
    /// Group and resource.
    pub fn gr(&self) -> GroupResource {
        GroupResource::new(&self.group, &self.resource)
    }

    /// The storage version.
    pub fn storage_version(&self) -> &str {
        self.versions.first().map(String::as_str).unwrap_or("v1")
    }

    /// `apiVersion` for a version: `v1` for core, `group/version` otherwise.
    pub fn api_version(&self, version: &str) -> String {
        if self.group.is_empty() {
            version.to_string()
        } else {
            format!("{}/{}", self.group, version)
        }
    }

    /// Whether strategic merge patch is accepted (built-in types only).
    pub fn accepts_strategic_merge(&self) -> bool {
        matches!(self.backing, Backing::Builtin)
    }

    /// The field labels of a custom resource's `selectableFields` at `version`.
    pub fn selectable_fields(&self, version: &str) -> Vec<String> {
        self.selectable.get(version).cloned().unwrap_or_default()
    }

    /// Whether this is a custom resource.
    pub fn is_custom(&self) -> bool {
        matches!(self.backing, Backing::Custom { .. })
    }

    /// The verbs announced in discovery.
    pub fn verbs(&self) -> Vec<&'static str> {
        match self.backing {
            Backing::Virtual => vec!["create"],
            _ => vec![
                "create",
                "delete",
                "deletecollection",
                "get",
                "list",
                "patch",
                "update",
                "watch",
            ],
        }
    }
}

struct Builtin {
    group: &'static str,
    version: &'static str,
    resource: &'static str,
    singular: &'static str,
    kind: &'static str,
    namespaced: bool,
    short: &'static [&'static str],
    all: bool,
    status: bool,
    scale: bool,
    unconditional: bool,
    create_on_update: bool,
    generation: GenerationRule,
}

const fn b(
    group: &'static str,
    version: &'static str,
    resource: &'static str,
    singular: &'static str,
    kind: &'static str,
    namespaced: bool,
) -> Builtin {
    Builtin {
        group,
        version,
        resource,
        singular,
        kind,
        namespaced,
        short: &[],
        all: false,
        status: false,
        scale: false,
        unconditional: true,
        create_on_update: false,
        generation: GenerationRule::None,
    }
}

fn builtins() -> Vec<Builtin> {
    use GenerationRule as G;
    vec![
        Builtin {
            short: &["ns"],
            status: true,
            ..b("", "v1", "namespaces", "namespace", "Namespace", false)
        },
        Builtin {
            short: &["po"],
            all: true,
            status: true,
            generation: G::Spec,
            ..b("", "v1", "pods", "pod", "Pod", true)
        },
        Builtin {
            short: &["cm"],
            ..b("", "v1", "configmaps", "configmap", "ConfigMap", true)
        },
        Builtin {
            ..b("", "v1", "secrets", "secret", "Secret", true)
        },
        Builtin {
            short: &["sa"],
            ..b(
                "",
                "v1",
                "serviceaccounts",
                "serviceaccount",
                "ServiceAccount",
                true,
            )
        },
        Builtin {
            short: &["svc"],
            all: true,
            status: true,
            create_on_update: true,
            ..b("", "v1", "services", "service", "Service", true)
        },
        Builtin {
            short: &["ev"],
            create_on_update: true,
            ..b("", "v1", "events", "event", "Event", true)
        },
        Builtin {
            short: &["no"],
            status: true,
            ..b("", "v1", "nodes", "node", "Node", false)
        },
        Builtin {
            unconditional: false,
            create_on_update: true,
            ..b(
                "coordination.k8s.io",
                "v1",
                "leases",
                "lease",
                "Lease",
                true,
            )
        },
        Builtin {
            short: &["deploy"],
            all: true,
            status: true,
            scale: true,
            generation: G::SpecOrAnnotations,
            ..b(
                "apps",
                "v1",
                "deployments",
                "deployment",
                "Deployment",
                true,
            )
        },
        Builtin {
            short: &["rs"],
            all: true,
            status: true,
            scale: true,
            generation: G::Spec,
            ..b(
                "apps",
                "v1",
                "replicasets",
                "replicaset",
                "ReplicaSet",
                true,
            )
        },
        Builtin {
            all: true,
            status: true,
            generation: G::Spec,
            ..b("batch", "v1", "jobs", "job", "Job", true)
        },
        Builtin {
            short: &["cj"],
            all: true,
            status: true,
            generation: G::Spec,
            ..b("batch", "v1", "cronjobs", "cronjob", "CronJob", true)
        },
        Builtin {
            short: &["ev"],
            create_on_update: true,
            ..b("events.k8s.io", "v1", "events", "event", "Event", true)
        },
        Builtin {
            create_on_update: true,
            ..b(
                "rbac.authorization.k8s.io",
                "v1",
                "roles",
                "role",
                "Role",
                true,
            )
        },
        Builtin {
            create_on_update: true,
            ..b(
                "rbac.authorization.k8s.io",
                "v1",
                "clusterroles",
                "clusterrole",
                "ClusterRole",
                false,
            )
        },
        Builtin {
            create_on_update: true,
            ..b(
                "rbac.authorization.k8s.io",
                "v1",
                "rolebindings",
                "rolebinding",
                "RoleBinding",
                true,
            )
        },
        Builtin {
            create_on_update: true,
            ..b(
                "rbac.authorization.k8s.io",
                "v1",
                "clusterrolebindings",
                "clusterrolebinding",
                "ClusterRoleBinding",
                false,
            )
        },
        Builtin {
            short: &["csr"],
            status: true,
            ..b(
                "certificates.k8s.io",
                "v1",
                "certificatesigningrequests",
                "certificatesigningrequest",
                "CertificateSigningRequest",
                false,
            )
        },
        Builtin {
            status: true,
            ..b(
                "apiregistration.k8s.io",
                "v1",
                "apiservices",
                "apiservice",
                "APIService",
                false,
            )
        },
        Builtin {
            short: &["crd", "crds"],
            status: true,
            unconditional: false,
            generation: G::Spec,
            ..b(
                "apiextensions.k8s.io",
                "v1",
                "customresourcedefinitions",
                "customresourcedefinition",
                "CustomResourceDefinition",
                false,
            )
        },
    ]
}

/// The review resources of authorization.k8s.io/v1 and authentication.k8s.io/v1
/// (create-only, never stored).
fn virtuals() -> Vec<ResourceType> {
    const AUTHORIZATION: &str = "authorization.k8s.io";
    [
        (
            AUTHORIZATION,
            "selfsubjectaccessreviews",
            "SelfSubjectAccessReview",
            false,
        ),
        (
            AUTHORIZATION,
            "subjectaccessreviews",
            "SubjectAccessReview",
            false,
        ),
        (
            AUTHORIZATION,
            "localsubjectaccessreviews",
            "LocalSubjectAccessReview",
            true,
        ),
        (
            "authentication.k8s.io",
            "tokenreviews",
            "TokenReview",
            false,
        ),
    ]
    .into_iter()
    .map(|(group, resource, kind, namespaced)| ResourceType {
        group: group.into(),
        versions: vec!["v1".into()],
        resource: resource.into(),
        singular: String::new(),
        kind: kind.into(),
        namespaced,
        short_names: vec![],
        categories: vec![],
        status: false,
        scale: None,
        allow_unconditional_update: false,
        allow_create_on_update: false,
        generation: GenerationRule::None,
        selectable: BTreeMap::new(),
        backing: Backing::Virtual,
    })
    .collect()
}

/// The set of served resources, keyed by group and plural.
#[derive(Debug, Clone)]
pub struct Registry {
    types: BTreeMap<GroupResource, ResourceType>,
}

impl Default for Registry {
    fn default() -> Self {
        Self::new()
    }
}

impl Registry {
    /// The built-in resources.
    pub fn new() -> Self {
        let mut types = BTreeMap::new();
        for t in builtins() {
            let rt = ResourceType {
                group: t.group.into(),
                versions: vec![t.version.into()],
                resource: t.resource.into(),
                singular: t.singular.into(),
                kind: t.kind.into(),
                namespaced: t.namespaced,
                short_names: t.short.iter().map(|s| s.to_string()).collect(),
                categories: match (t.all, t.group) {
                    (true, _) => vec!["all".into()],
                    (_, "apiextensions.k8s.io" | "apiregistration.k8s.io") => {
                        vec!["api-extensions".into()]
                    }
                    _ => vec![],
                },
                status: t.status,
                scale: t.scale.then(|| ScalePaths {
                    spec_replicas: "spec.replicas".into(),
                    status_replicas: "status.replicas".into(),
                    label_selector: None,
                }),
                allow_unconditional_update: t.unconditional,
                allow_create_on_update: t.create_on_update,
                generation: t.generation,
                selectable: BTreeMap::new(),
                backing: Backing::Builtin,
            };
            types.insert(rt.gr(), rt);
        }
        for rt in virtuals() {
            types.insert(rt.gr(), rt);
        }
        Self { types }
    }

    /// Looks a resource up by group, version and plural.
    pub fn lookup(&self, group: &str, version: &str, resource: &str) -> Option<&ResourceType> {
        self.types
            .get(&GroupResource::new(group, resource))
            .filter(|t| t.versions.iter().any(|v| v == version))
    }

    /// Looks a resource up by group and plural, any version.
    pub fn get(&self, gr: &GroupResource) -> Option<&ResourceType> {
        self.types.get(gr)
    }

    /// Finds the resource of a kind in a group.
    pub fn by_kind(&self, group: &str, kind: &str) -> Option<&ResourceType> {
        self.types
            .values()
            .find(|t| t.group == group && t.kind == kind)
    }

    /// All served resources.
    pub fn all(&self) -> impl Iterator<Item = &ResourceType> {
        self.types.values()
    }

    /// Adds or replaces a custom resource type.
    pub fn register(&mut self, rt: ResourceType) {
        self.types.insert(rt.gr(), rt);
    }

    /// Removes a custom resource type.
    pub fn unregister(&mut self, gr: &GroupResource) {
        if self.types.get(gr).is_some_and(ResourceType::is_custom) {
            self.types.remove(gr);
        }
    }

    /// Served group/versions, each with its resources, in discovery order (core first).
    pub fn group_versions(&self) -> BTreeMap<(String, String), Vec<&ResourceType>> {
        let mut out: BTreeMap<(String, String), Vec<&ResourceType>> = BTreeMap::new();
        for t in self.types.values() {
            for v in &t.versions {
                out.entry((t.group.clone(), v.clone())).or_default().push(t);
            }
        }
        out
    }
}

/// Builds the served type of a CRD, or says why it cannot be served.
///
/// # Errors
/// A message (used in the CRD's `NamesAccepted`/`Established` conditions and in 422s) when
/// the CRD lacks names, versions or a storage version, or a schema is not structural.
pub fn custom_type(crd: &Value) -> Result<ResourceType, String> {
    let spec = crd.get("spec").ok_or("spec: Required value")?;
    let group = spec
        .get("group")
        .and_then(Value::as_str)
        .ok_or("spec.group: Required value")?;
    let names = spec.get("names").ok_or("spec.names: Required value")?;
    let plural = str_at(names, "plural").ok_or("spec.names.plural: Required value")?;
    let kind = str_at(names, "kind").ok_or("spec.names.kind: Required value")?;
    let singular = str_at(names, "singular")
        .map(str::to_string)
        .unwrap_or_else(|| kind.to_lowercase());
    let namespaced = match spec.get("scope").and_then(Value::as_str) {
        Some("Namespaced") => true,
        Some("Cluster") => false,
        _ => {
            return Err(
                "spec.scope: Unsupported value: supported values: \"Cluster\", \"Namespaced\""
                    .into(),
            );
        }
    };
    let versions = spec
        .get("versions")
        .and_then(Value::as_array)
        .filter(|v| !v.is_empty())
        .ok_or(
            "spec.versions: Invalid value: must have exactly one version marked as storage version",
        )?;
    let mut served = Vec::new();
    let mut storage = None;
    let mut schemas = BTreeMap::new();
    let mut printer_columns = Vec::new();
    let mut status = false;
    let mut scale = None;
    let mut selectable = BTreeMap::new();
    for v in versions {
        let name = str_at(v, "name").ok_or("spec.versions[].name: Required value")?;
        if v.get("storage").and_then(Value::as_bool) == Some(true) {
            if storage.is_some() {
                return Err("spec.versions: Invalid value: must have exactly one version marked as storage version".into());
            }
            storage = Some(name.to_string());
            printer_columns = v
                .get("additionalPrinterColumns")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            if let Some(sub) = v.get("subresources") {
                status = sub.get("status").is_some();
                if let Some(s) = sub.get("scale") {
                    scale = Some(ScalePaths {
                        spec_replicas: path_of(s, "specReplicasPath")?,
                        status_replicas: path_of(s, "statusReplicasPath")?,
                        label_selector: str_at(s, "labelSelectorPath")
                            .map(|p| p.trim_start_matches('.').to_string()),
                    });
                }
            }
        }
        if v.get("served").and_then(Value::as_bool) == Some(true) {
            served.push(name.to_string());
            let fields = v.get("selectableFields").and_then(Value::as_array);
            let labels = fields.into_iter().flatten().filter_map(|f| {
                str_at(f, "jsonPath").map(|p| p.trim_start_matches('.').to_string())
            });
            selectable.insert(name.to_string(), labels.collect());
        }
        if let Some(schema) = v.get("schema").and_then(|s| s.get("openAPIV3Schema")) {
            let schema = Schema::new(schema.clone())
                .map_err(|e| format!("spec.versions[{name}].schema.openAPIV3Schema: {e}"))?;
            schemas.insert(name.to_string(), schema);
        }
    }
    let storage = storage.ok_or(
        "spec.versions: Invalid value: must have exactly one version marked as storage version",
    )?;
    // The storage version leads when served, so it is the one written.
    served.sort_by_key(|v| *v != storage);
    Ok(ResourceType {
        group: group.to_string(),
        versions: served,
        resource: plural.to_string(),
        singular,
        kind: kind.to_string(),
        namespaced,
        short_names: string_list(names.get("shortNames")),
        categories: string_list(names.get("categories")),
        status,
        scale,
        allow_unconditional_update: false,
        allow_create_on_update: false,
        generation: GenerationRule::AllButMetadata,
        selectable,
        backing: Backing::Custom {
            crd: crd["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            schemas,
            printer_columns,
        },
    })
}

fn str_at<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str).filter(|s| !s.is_empty())
}

fn path_of(v: &Value, key: &str) -> Result<String, String> {
    str_at(v, key)
        .map(|p| p.trim_start_matches('.').to_string())
        .ok_or_else(|| format!("subresources.scale.{key}: Required value"))
}

fn string_list(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn leases_refuse_unconditional_updates_and_configmaps_allow_them() {
        let r = Registry::new();
        assert!(
            !r.lookup("coordination.k8s.io", "v1", "leases")
                .unwrap()
                .allow_unconditional_update
        );
        assert!(
            r.lookup("", "v1", "configmaps")
                .unwrap()
                .allow_unconditional_update
        );
    }

    #[test]
    fn every_built_in_type_takes_its_update_rules_from_its_v1_34_strategy() {
        // (group, resource, AllowUnconditionalUpdate, AllowCreateOnUpdate)
        let mut expected = vec![
            ("", "configmaps", true, false),
            ("", "events", true, true),
            ("", "namespaces", true, false),
            ("", "nodes", true, false),
            ("", "pods", true, false),
            ("", "secrets", true, false),
            ("", "serviceaccounts", true, false),
            ("", "services", true, true),
            ("apiregistration.k8s.io", "apiservices", true, false),
            (
                "apiextensions.k8s.io",
                "customresourcedefinitions",
                false,
                false,
            ),
            ("apps", "deployments", true, false),
            (
                "certificates.k8s.io",
                "certificatesigningrequests",
                true,
                false,
            ),
            ("apps", "replicasets", true, false),
            ("batch", "cronjobs", true, false),
            ("batch", "jobs", true, false),
            ("coordination.k8s.io", "leases", false, true),
            ("events.k8s.io", "events", true, true),
            (
                "rbac.authorization.k8s.io",
                "clusterrolebindings",
                true,
                true,
            ),
            ("rbac.authorization.k8s.io", "clusterroles", true, true),
            ("rbac.authorization.k8s.io", "rolebindings", true, true),
            ("rbac.authorization.k8s.io", "roles", true, true),
        ];
        let registry = Registry::new();
        let mut served: Vec<_> = registry
            .all()
            .filter(|t| matches!(t.backing, Backing::Builtin))
            .map(|t| {
                (
                    t.group.as_str(),
                    t.resource.as_str(),
                    t.allow_unconditional_update,
                    t.allow_create_on_update,
                )
            })
            .collect();
        expected.sort();
        served.sort();
        assert_eq!(served, expected);
    }

    #[test]
    fn custom_resources_refuse_unconditional_updates_and_are_never_created_by_a_put() {
        let crd = json!({
            "metadata": {"name": "memcacheds.cache.example.com"},
            "spec": {"group": "cache.example.com", "scope": "Namespaced",
                "names": {"plural": "memcacheds", "kind": "Memcached"},
                "versions": [{"name": "v1", "served": true, "storage": true}]}
        });
        let t = custom_type(&crd).unwrap();
        assert!(!t.allow_unconditional_update && !t.allow_create_on_update);
    }

    #[test]
    fn a_crd_becomes_a_namespaced_type_with_status_and_its_storage_version_first() {
        let crd = json!({
            "metadata": {"name": "memcacheds.cache.example.com"},
            "spec": {
                "group": "cache.example.com",
                "scope": "Namespaced",
                "names": {"plural": "memcacheds", "kind": "Memcached", "shortNames": ["mc"]},
                "versions": [
                    {"name": "v1alpha0", "served": true, "storage": false},
                    {"name": "v1alpha1", "served": true, "storage": true, "subresources": {"status": {}}}
                ]
            }
        });
        let t = custom_type(&crd).unwrap();
        assert_eq!(t.versions, vec!["v1alpha1", "v1alpha0"]);
        assert!(t.status && t.namespaced && t.is_custom());
        assert_eq!(t.singular, "memcached");
        assert_eq!(t.short_names, vec!["mc"]);
    }

    #[test]
    fn a_crd_without_a_storage_version_is_refused() {
        let crd = json!({"spec": {"group": "g", "scope": "Cluster",
            "names": {"plural": "xs", "kind": "X"},
            "versions": [{"name": "v1", "served": true, "storage": false}]}});
        assert!(custom_type(&crd).unwrap_err().contains("storage version"));
    }
}

//! The resource types the server serves: built-in kinds and the custom resources of
//! Established CRDs, with the per-type rules (scope, subresources, update strategy) that
//! kube-apiserver's registry strategies encode.
//!
//! The built-in resources are one Rust table, `BUILTINS`: a row per resource with what
//! kube-apiserver 1.34's discovery says of it (group, versions, plural, kind, scope, short
//! names, the `all` category, status and scale subresources; singular names, verbs,
//! categories and storage version hashes follow from these) and the few strategy rules that
//! differ between kinds. Every verb, selector and subresource is served from the row alone;
//! what a kind does beyond that (defaults, validation, what a create adds) is looked up by
//! group and resource in [`super::objects`] and [`super::kinds`]. A table in the source
//! rather than a file captured from a server: the rows hold rules (the update strategies,
//! where a kind is stored) that discovery does not show, and the compiler checks them. The
//! differential test compares every built-in group version's discovery with the real
//! server's, so a row that drifts from kube-apiserver fails it.
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
        /// `spec.conversion.webhook` when the conversion strategy is `Webhook` (see
        /// [`super::conversion`]).
        conversion_webhook: Option<Value>,
    },
    /// Create-only review resources computed on the fly (access reviews).
    Virtual,
    /// The components' health, computed on each get or list (see [`super::component_status`]).
    Health,
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
    /// The `group/version/kind` its objects are kept in by kube-apiserver when that is not
    /// its own storage version's (CRDs in `v1beta1`, `events.k8s.io` Events as core
    /// Events): what its `storageVersionHash` is the hash of.
    pub encoded_as: Option<&'static str>,
    /// A delete that removes the object at once answers with the object rather than a
    /// `Success` Status (the store's `ReturnDeletedObject`: pods, StorageClasses, …).
    pub returns_deleted_object: bool,
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
            Backing::Health => vec!["get", "list"],
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

/// How kube-apiserver serves a built-in resource: what its storage backs it with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Served {
    /// A stored resource with every verb.
    Stored,
    /// Create-only, computed and never stored (reviews, `bindings`).
    CreateOnly,
    /// Get and list only, computed on each request (`componentstatuses`).
    Health,
}

/// One row of [`BUILTINS`]: what kube-apiserver 1.34's discovery says of a resource, and
/// the two update rules and the generation rule of its registry strategy.
#[derive(Debug, Clone, Copy)]
struct Builtin {
    group: &'static str,
    /// Served versions, the storage (and preferred) version first.
    versions: &'static [&'static str],
    resource: &'static str,
    kind: &'static str,
    namespaced: bool,
    short: &'static [&'static str],
    /// Member of the `all` category (`kubectl get all`).
    all: bool,
    status: bool,
    scale: bool,
    unconditional: bool,
    create_on_update: bool,
    generation: GenerationRule,
    served: Served,
    encoded_as: Option<&'static str>,
    returns_deleted: bool,
}

const V1: &[&str] = &["v1"];
const NAMESPACED: bool = true;
const CLUSTER: bool = false;

/// A stored resource with the strategies' common rules: unconditional updates allowed, no
/// create on update, no generation, no subresource.
const fn r(
    group: &'static str,
    resource: &'static str,
    kind: &'static str,
    namespaced: bool,
) -> Builtin {
    Builtin {
        group,
        versions: V1,
        resource,
        kind,
        namespaced,
        short: &[],
        all: false,
        status: false,
        scale: false,
        unconditional: true,
        create_on_update: false,
        generation: GenerationRule::None,
        served: Served::Stored,
        encoded_as: None,
        returns_deleted: false,
    }
}

impl Builtin {
    const fn short(self, short: &'static [&'static str]) -> Self {
        Self { short, ..self }
    }
    const fn all(self) -> Self {
        Self { all: true, ..self }
    }
    const fn status(self) -> Self {
        Self {
            status: true,
            ..self
        }
    }
    const fn scale(self) -> Self {
        Self {
            scale: true,
            ..self
        }
    }
    const fn generation(self, generation: GenerationRule) -> Self {
        Self { generation, ..self }
    }
    const fn versions(self, versions: &'static [&'static str]) -> Self {
        Self { versions, ..self }
    }
    /// `AllowCreateOnUpdate`: a PUT of a missing object creates it.
    const fn create_on_update(self) -> Self {
        Self {
            create_on_update: true,
            ..self
        }
    }
    /// `AllowUnconditionalUpdate` false: a PUT must name a resourceVersion.
    const fn conditional(self) -> Self {
        Self {
            unconditional: false,
            ..self
        }
    }
    /// Kept in etcd as another group version kind than its storage version's.
    const fn encoded_as(self, gvk: &'static str) -> Self {
        Self {
            encoded_as: Some(gvk),
            ..self
        }
    }
    /// `ReturnDeletedObject`, as read from the real server's answers to deletes.
    const fn returns_deleted(self) -> Self {
        Self {
            returns_deleted: true,
            ..self
        }
    }
    const fn create_only(self) -> Self {
        Self {
            served: Served::CreateOnly,
            unconditional: false,
            ..self
        }
    }

    const fn health(self) -> Self {
        Self {
            served: Served::Health,
            unconditional: false,
            ..self
        }
    }
}

const CORE: &str = "";
const ADMISSION: &str = "admissionregistration.k8s.io";
const APPS: &str = "apps";
const AUTHENTICATION: &str = "authentication.k8s.io";
const AUTHORIZATION: &str = "authorization.k8s.io";
const FLOWCONTROL: &str = "flowcontrol.apiserver.k8s.io";
const NETWORKING: &str = "networking.k8s.io";
const RBAC: &str = "rbac.authorization.k8s.io";
const RESOURCE: &str = "resource.k8s.io";
const STORAGE: &str = "storage.k8s.io";

/// Every resource kube-apiserver 1.34 serves by default (its GA group versions), as its
/// discovery lists it, but `selfsubjectrulesreviews` (`componentstatuses` are answered by
/// [`super::component_status`]). Singular
/// names are the kinds in lower case; categories are `all` where marked and
/// `api-extensions` for the admission, CRD and APIService kinds (see [`categories`]);
/// the storage version hash follows from group, storage version and kind
/// ([`super::discovery::storage_version_hash`]). `AllowCreateOnUpdate` was read from the
/// real server (a PUT of a missing object), the generation rules from the strategies.
const BUILTINS: &[Builtin] = {
    use GenerationRule::{AllButMetadata, Spec, SpecOrAnnotations};
    &[
        r(CORE, "bindings", "Binding", NAMESPACED).create_only(),
        r(CORE, "componentstatuses", "ComponentStatus", CLUSTER)
            .short(&["cs"])
            .health(),
        r(CORE, "configmaps", "ConfigMap", NAMESPACED).short(&["cm"]),
        r(CORE, "endpoints", "Endpoints", NAMESPACED)
            .short(&["ep"])
            .create_on_update(),
        r(CORE, "events", "Event", NAMESPACED)
            .short(&["ev"])
            .create_on_update(),
        r(CORE, "limitranges", "LimitRange", NAMESPACED)
            .short(&["limits"])
            .create_on_update(),
        r(CORE, "namespaces", "Namespace", CLUSTER)
            .short(&["ns"])
            .status(),
        r(CORE, "nodes", "Node", CLUSTER).short(&["no"]).status(),
        r(
            CORE,
            "persistentvolumeclaims",
            "PersistentVolumeClaim",
            NAMESPACED,
        )
        .short(&["pvc"])
        .status(),
        r(CORE, "persistentvolumes", "PersistentVolume", CLUSTER)
            .short(&["pv"])
            .status(),
        r(CORE, "pods", "Pod", NAMESPACED)
            .short(&["po"])
            .all()
            .status()
            .generation(Spec)
            .returns_deleted(),
        r(CORE, "podtemplates", "PodTemplate", NAMESPACED)
            .generation(AllButMetadata)
            .returns_deleted(),
        r(
            CORE,
            "replicationcontrollers",
            "ReplicationController",
            NAMESPACED,
        )
        .short(&["rc"])
        .all()
        .status()
        .scale()
        .generation(Spec),
        r(CORE, "resourcequotas", "ResourceQuota", NAMESPACED)
            .short(&["quota"])
            .status()
            .returns_deleted(),
        r(CORE, "secrets", "Secret", NAMESPACED),
        r(CORE, "serviceaccounts", "ServiceAccount", NAMESPACED).short(&["sa"]),
        r(CORE, "services", "Service", NAMESPACED)
            .short(&["svc"])
            .all()
            .status()
            .create_on_update()
            .returns_deleted(),
        r(
            ADMISSION,
            "mutatingwebhookconfigurations",
            "MutatingWebhookConfiguration",
            CLUSTER,
        )
        .generation(AllButMetadata),
        r(
            ADMISSION,
            "validatingadmissionpolicies",
            "ValidatingAdmissionPolicy",
            CLUSTER,
        )
        .status()
        .generation(Spec),
        r(
            ADMISSION,
            "validatingadmissionpolicybindings",
            "ValidatingAdmissionPolicyBinding",
            CLUSTER,
        )
        .generation(Spec),
        r(
            ADMISSION,
            "validatingwebhookconfigurations",
            "ValidatingWebhookConfiguration",
            CLUSTER,
        )
        .generation(AllButMetadata),
        r(
            "apiextensions.k8s.io",
            "customresourcedefinitions",
            "CustomResourceDefinition",
            CLUSTER,
        )
        .short(&["crd", "crds"])
        .status()
        .conditional()
        .generation(Spec)
        .encoded_as("apiextensions.k8s.io/v1beta1/CustomResourceDefinition"),
        r(
            "apiregistration.k8s.io",
            "apiservices",
            "APIService",
            CLUSTER,
        )
        .status(),
        r(
            APPS,
            "controllerrevisions",
            "ControllerRevision",
            NAMESPACED,
        ),
        r(APPS, "daemonsets", "DaemonSet", NAMESPACED)
            .short(&["ds"])
            .all()
            .status()
            .generation(Spec),
        r(APPS, "deployments", "Deployment", NAMESPACED)
            .short(&["deploy"])
            .all()
            .status()
            .scale()
            .generation(SpecOrAnnotations),
        r(APPS, "replicasets", "ReplicaSet", NAMESPACED)
            .short(&["rs"])
            .all()
            .status()
            .scale()
            .generation(Spec),
        r(APPS, "statefulsets", "StatefulSet", NAMESPACED)
            .short(&["sts"])
            .all()
            .status()
            .scale()
            .generation(Spec),
        r(
            AUTHENTICATION,
            "selfsubjectreviews",
            "SelfSubjectReview",
            CLUSTER,
        )
        .create_only(),
        r(AUTHENTICATION, "tokenreviews", "TokenReview", CLUSTER).create_only(),
        r(
            AUTHORIZATION,
            "localsubjectaccessreviews",
            "LocalSubjectAccessReview",
            NAMESPACED,
        )
        .create_only(),
        r(
            AUTHORIZATION,
            "selfsubjectaccessreviews",
            "SelfSubjectAccessReview",
            CLUSTER,
        )
        .create_only(),
        r(
            AUTHORIZATION,
            "selfsubjectrulesreviews",
            "SelfSubjectRulesReview",
            CLUSTER,
        )
        .create_only(),
        r(
            AUTHORIZATION,
            "subjectaccessreviews",
            "SubjectAccessReview",
            CLUSTER,
        )
        .create_only(),
        r(
            "autoscaling",
            "horizontalpodautoscalers",
            "HorizontalPodAutoscaler",
            NAMESPACED,
        )
        .versions(&["v2", "v1"])
        .short(&["hpa"])
        .all()
        .status(),
        r("batch", "cronjobs", "CronJob", NAMESPACED)
            .short(&["cj"])
            .all()
            .status()
            .generation(Spec),
        r("batch", "jobs", "Job", NAMESPACED)
            .all()
            .status()
            .generation(Spec),
        r(
            "certificates.k8s.io",
            "certificatesigningrequests",
            "CertificateSigningRequest",
            CLUSTER,
        )
        .short(&["csr"])
        .status(),
        r("coordination.k8s.io", "leases", "Lease", NAMESPACED)
            .conditional()
            .create_on_update(),
        r(
            "discovery.k8s.io",
            "endpointslices",
            "EndpointSlice",
            NAMESPACED,
        )
        .generation(AllButMetadata),
        r("events.k8s.io", "events", "Event", NAMESPACED)
            .short(&["ev"])
            .create_on_update()
            .encoded_as("/v1/Event"),
        r(FLOWCONTROL, "flowschemas", "FlowSchema", CLUSTER)
            .status()
            .generation(Spec),
        r(
            FLOWCONTROL,
            "prioritylevelconfigurations",
            "PriorityLevelConfiguration",
            CLUSTER,
        )
        .status()
        .generation(Spec),
        r(NETWORKING, "ingressclasses", "IngressClass", CLUSTER).generation(Spec),
        r(NETWORKING, "ingresses", "Ingress", NAMESPACED)
            .short(&["ing"])
            .status()
            .generation(Spec),
        r(NETWORKING, "ipaddresses", "IPAddress", CLUSTER).short(&["ip"]),
        r(NETWORKING, "networkpolicies", "NetworkPolicy", NAMESPACED)
            .short(&["netpol"])
            .generation(Spec),
        r(NETWORKING, "servicecidrs", "ServiceCIDR", CLUSTER).status(),
        r("node.k8s.io", "runtimeclasses", "RuntimeClass", CLUSTER).create_on_update(),
        r(
            "policy",
            "poddisruptionbudgets",
            "PodDisruptionBudget",
            NAMESPACED,
        )
        .short(&["pdb"])
        .status()
        .generation(Spec),
        r(RBAC, "clusterrolebindings", "ClusterRoleBinding", CLUSTER).create_on_update(),
        r(RBAC, "clusterroles", "ClusterRole", CLUSTER).create_on_update(),
        r(RBAC, "rolebindings", "RoleBinding", NAMESPACED).create_on_update(),
        r(RBAC, "roles", "Role", NAMESPACED).create_on_update(),
        r(RESOURCE, "deviceclasses", "DeviceClass", CLUSTER)
            .generation(Spec)
            .encoded_as("resource.k8s.io/v1beta2/DeviceClass")
            .returns_deleted(),
        r(RESOURCE, "resourceclaims", "ResourceClaim", NAMESPACED)
            .status()
            .encoded_as("resource.k8s.io/v1beta2/ResourceClaim")
            .returns_deleted(),
        r(
            RESOURCE,
            "resourceclaimtemplates",
            "ResourceClaimTemplate",
            NAMESPACED,
        )
        .encoded_as("resource.k8s.io/v1beta2/ResourceClaimTemplate")
        .returns_deleted(),
        r(RESOURCE, "resourceslices", "ResourceSlice", CLUSTER)
            .generation(Spec)
            .encoded_as("resource.k8s.io/v1beta2/ResourceSlice")
            .returns_deleted(),
        r(
            "scheduling.k8s.io",
            "priorityclasses",
            "PriorityClass",
            CLUSTER,
        )
        .short(&["pc"])
        .generation(Spec),
        r(STORAGE, "csidrivers", "CSIDriver", CLUSTER).returns_deleted(),
        r(STORAGE, "csinodes", "CSINode", CLUSTER).returns_deleted(),
        r(
            STORAGE,
            "csistoragecapacities",
            "CSIStorageCapacity",
            NAMESPACED,
        ),
        r(STORAGE, "storageclasses", "StorageClass", CLUSTER)
            .short(&["sc"])
            .returns_deleted(),
        r(STORAGE, "volumeattachments", "VolumeAttachment", CLUSTER)
            .status()
            .returns_deleted(),
        r(
            STORAGE,
            "volumeattributesclasses",
            "VolumeAttributesClass",
            CLUSTER,
        )
        .short(&["vac"])
        .encoded_as("storage.k8s.io/v1beta1/VolumeAttributesClass"),
    ]
};

/// The categories of a built-in resource: `all` where its row says so, `api-extensions`
/// for the kinds that extend the API (`admissionregistration.k8s.io`, CRDs, APIServices).
fn categories(row: &Builtin) -> Vec<String> {
    match (row.all, row.group) {
        (true, _) => vec!["all".into()],
        (_, ADMISSION | "apiextensions.k8s.io" | "apiregistration.k8s.io") => {
            vec!["api-extensions".into()]
        }
        _ => vec![],
    }
}

impl Builtin {
    fn resource_type(&self) -> ResourceType {
        ResourceType {
            group: self.group.into(),
            versions: self.versions.iter().map(|v| v.to_string()).collect(),
            resource: self.resource.into(),
            singular: self.kind.to_lowercase(),
            kind: self.kind.into(),
            namespaced: self.namespaced,
            short_names: self.short.iter().map(|s| s.to_string()).collect(),
            categories: categories(self),
            status: self.status,
            scale: self.scale.then(|| ScalePaths {
                spec_replicas: "spec.replicas".into(),
                status_replicas: "status.replicas".into(),
                label_selector: None,
            }),
            allow_unconditional_update: self.unconditional,
            allow_create_on_update: self.create_on_update,
            generation: self.generation,
            selectable: BTreeMap::new(),
            backing: match self.served {
                Served::Stored => Backing::Builtin,
                Served::CreateOnly => Backing::Virtual,
                Served::Health => Backing::Health,
            },
            encoded_as: self.encoded_as,
            returns_deleted_object: self.returns_deleted,
        }
    }
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
        let types = BUILTINS
            .iter()
            .map(|row| {
                let rt = row.resource_type();
                (rt.gr(), rt)
            })
            .collect();
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
            conversion_webhook: (crd["spec"]["conversion"]["strategy"] == "Webhook")
                .then(|| crd["spec"]["conversion"]["webhook"].clone()),
        },
        encoded_as: None,
        returns_deleted_object: false,
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
    fn only_the_strategies_that_say_so_create_on_update_or_refuse_unconditional_updates() {
        let registry = Registry::new();
        let stored = || {
            registry
                .all()
                .filter(|t| matches!(t.backing, Backing::Builtin))
        };
        let mut create_on_update: Vec<String> = stored()
            .filter(|t| t.allow_create_on_update)
            .map(|t| t.gr().to_string())
            .collect();
        create_on_update.sort();
        // As the real server answers a PUT of a missing object of each resource.
        assert_eq!(
            create_on_update,
            [
                "clusterrolebindings.rbac.authorization.k8s.io",
                "clusterroles.rbac.authorization.k8s.io",
                "endpoints",
                "events",
                "events.events.k8s.io",
                "leases.coordination.k8s.io",
                "limitranges",
                "rolebindings.rbac.authorization.k8s.io",
                "roles.rbac.authorization.k8s.io",
                "runtimeclasses.node.k8s.io",
                "services",
            ]
        );
        let mut conditional: Vec<String> = stored()
            .filter(|t| !t.allow_unconditional_update)
            .map(|t| t.gr().to_string())
            .collect();
        conditional.sort();
        assert_eq!(
            conditional,
            [
                "customresourcedefinitions.apiextensions.k8s.io",
                "leases.coordination.k8s.io"
            ]
        );
    }

    #[test]
    fn every_group_version_kube_apiserver_serves_by_default_is_served() {
        let registry = Registry::new();
        let mut group_versions: Vec<String> = registry
            .group_versions()
            .keys()
            .map(|(g, v)| {
                if g.is_empty() {
                    v.clone()
                } else {
                    format!("{g}/{v}")
                }
            })
            .collect();
        group_versions.sort();
        assert_eq!(group_versions.len(), 22);
        assert!(group_versions.contains(&"autoscaling/v1".to_string()));
        assert_eq!(
            registry
                .lookup("autoscaling", "v1", "horizontalpodautoscalers")
                .map(ResourceType::storage_version),
            Some("v2")
        );
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

//! The readers of `opconform init`: each takes the text of one file of a kubebuilder or
//! operator-sdk project and returns what the profile needs from it, or says what in the
//! file is not what the scaffold writes.
//!
//! YAML is read with serde_yaml; `cmd/main.go` is scanned with regular expressions, not
//! parsed: the scaffold's shapes (`flag.BoolVar(&v, "name", default, …)`,
//! `LeaderElectionID: "…"` in `ctrl.Options`) are matched, and a value that is not a
//! literal is returned as the expression it is, for the caller to report.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use regex::Regex;
use serde_yaml::Value;

/// What is wrong with a file's text (the caller names the file).
pub type Problem = String;

/// The parts of a `PROJECT` file the profile uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Project {
    /// `projectName`.
    pub name: String,
    /// `domain`.
    pub domain: String,
    /// `repo`: the Go module path.
    pub repo: Option<String>,
    /// `layout`.
    pub layout: Vec<String>,
    /// `resources`, those with an API of the project's own first.
    pub resources: Vec<Resource>,
}

/// One resource of a `PROJECT` file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resource {
    /// `group` (empty for core).
    pub group: String,
    /// `version`.
    pub version: String,
    /// `kind`.
    pub kind: String,
    /// `domain`.
    pub domain: String,
    /// Whether the project defines its API (`api:` present).
    pub own_api: bool,
    /// `api.namespaced`.
    pub namespaced: bool,
}

impl Resource {
    /// The API group, as `apiVersion` names it (`cache.example.org`).
    pub fn api_group(&self) -> String {
        match (self.group.is_empty(), self.domain.is_empty()) {
            (true, _) => self.domain.clone(),
            (false, true) => self.group.clone(),
            (false, false) => format!("{}.{}", self.group, self.domain),
        }
    }

    /// `apiVersion`.
    pub fn api_version(&self) -> String {
        format!("{}/{}", self.api_group(), self.version)
    }
}

fn string(map: &Value, key: &str) -> Option<String> {
    map.get(key).and_then(Value::as_str).map(str::to_string)
}

/// The items of the sequence at `key` of `map` (none when there is none).
fn list<'a>(map: &'a Value, key: &str) -> impl Iterator<Item = &'a Value> {
    map.get(key)
        .and_then(Value::as_sequence)
        .into_iter()
        .flatten()
}

fn strings(value: Option<&Value>) -> Vec<String> {
    value
        .and_then(Value::as_sequence)
        .map(|seq| {
            seq.iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

fn yaml(text: &str) -> Result<Value, Problem> {
    serde_yaml::from_str(text).map_err(|e| format!("not YAML: {e}"))
}

/// Every YAML document of `text`.
pub fn documents(text: &str) -> Result<Vec<Value>, Problem> {
    let mut docs = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(text) {
        let value: Value =
            serde::Deserialize::deserialize(doc).map_err(|e| format!("not YAML: {e}"))?;
        if !matches!(value, Value::Null) {
            docs.push(value);
        }
    }
    Ok(docs)
}

/// Reads a `PROJECT` file.
///
/// # Errors
/// Not YAML, no `layout` of kubebuilder's Go plugin (`go.kubebuilder.io/…`, which
/// operator-sdk's Go projects use too), or no `projectName`.
pub fn project(text: &str) -> Result<Project, Problem> {
    let doc = yaml(text)?;
    if !doc.is_mapping() {
        return Err("expected a mapping with layout, projectName, domain and resources".into());
    }
    let layout = match doc.get("layout") {
        Some(Value::String(one)) => vec![one.clone()],
        other => strings(other),
    };
    if !layout.iter().any(|l| l.starts_with("go.kubebuilder.io/")) {
        return Err(format!(
            "layout {layout:?}: expected go.kubebuilder.io/v4, the Go layout of kubebuilder and \
             operator-sdk"
        ));
    }
    let name = string(&doc, "projectName")
        .filter(|n| !n.is_empty())
        .ok_or("expected projectName")?;
    let domain = string(&doc, "domain").unwrap_or_default();
    let mut resources: Vec<Resource> = list(&doc, "resources")
        .filter_map(|r| {
            Some(Resource {
                group: string(r, "group").unwrap_or_default(),
                version: string(r, "version")?,
                kind: string(r, "kind")?,
                domain: string(r, "domain").unwrap_or_else(|| domain.clone()),
                own_api: r.get("api").is_some(),
                namespaced: r
                    .get("api")
                    .and_then(|a| a.get("namespaced"))
                    .and_then(Value::as_bool)
                    .unwrap_or(false),
            })
        })
        .collect();
    resources.sort_by_key(|r| !r.own_api);
    Ok(Project {
        name,
        domain,
        repo: string(&doc, "repo"),
        layout,
        resources,
    })
}

/// The parts of a `kustomization.yaml` the profile uses.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Kustomization {
    /// `namespace`.
    pub namespace: Option<String>,
    /// `namePrefix` (empty when none).
    pub name_prefix: String,
    /// `resources`, as written (commented-out entries are not there).
    pub resources: Vec<String>,
    /// The files of `patches` (and the older `patchesStrategicMerge`, `patchesJson6902`).
    pub patches: Vec<String>,
    /// Labels added to selectors (`labels` with `includeSelectors: true`).
    pub selector_labels: BTreeMap<String, String>,
    /// `images`: the name an image is given, by its name in the manifests.
    pub images: BTreeMap<String, String>,
}

/// Reads a `kustomization.yaml`.
///
/// # Errors
/// Not YAML, or not a mapping.
pub fn kustomization(text: &str) -> Result<Kustomization, Problem> {
    let doc = yaml(text)?;
    if doc.is_null() {
        return Ok(Kustomization::default());
    }
    if !doc.is_mapping() {
        return Err("expected a mapping (resources, patches, namespace, …)".into());
    }
    let mut patches = Vec::new();
    for key in ["patches", "patchesStrategicMerge", "patchesJson6902"] {
        for patch in list(&doc, key) {
            match patch {
                Value::String(path) => patches.push(path.clone()),
                other => patches.extend(string(other, "path")),
            }
        }
    }
    let mut selector_labels = BTreeMap::new();
    for labels in list(&doc, "labels") {
        if labels.get("includeSelectors").and_then(Value::as_bool) == Some(true) {
            for (k, v) in labels
                .get("pairs")
                .and_then(Value::as_mapping)
                .into_iter()
                .flatten()
            {
                if let (Some(k), Some(v)) = (k.as_str(), v.as_str()) {
                    selector_labels.insert(k.to_string(), v.to_string());
                }
            }
        }
    }
    let mut images = BTreeMap::new();
    for image in list(&doc, "images") {
        let Some(name) = string(image, "name") else {
            continue;
        };
        let new_name = string(image, "newName").unwrap_or_else(|| name.clone());
        let reference = match (string(image, "newTag"), string(image, "digest")) {
            (_, Some(digest)) => format!("{new_name}@{digest}"),
            (Some(tag), None) => format!("{new_name}:{tag}"),
            (None, None) => new_name,
        };
        images.insert(name, reference);
    }
    Ok(Kustomization {
        namespace: string(&doc, "namespace"),
        name_prefix: string(&doc, "namePrefix").unwrap_or_default(),
        resources: strings(doc.get("resources")),
        patches,
        selector_labels,
        images,
    })
}

/// The manager's Deployment in `config/manager/manager.yaml`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManagerDeployment {
    /// Its name, before any prefix.
    pub name: String,
    /// The labels of `spec.selector.matchLabels`.
    pub match_labels: BTreeMap<String, String>,
    /// The manager container's name (`manager`, else the first).
    pub container: String,
    /// Its image.
    pub image: String,
    /// Its arguments.
    pub args: Vec<String>,
}

/// Reads the manager's Deployment out of the manifests `text`.
///
/// # Errors
/// Not YAML, no Deployment, or one without a container.
pub fn manager_deployment(text: &str) -> Result<ManagerDeployment, Problem> {
    let docs = documents(text)?;
    let deployment = docs
        .iter()
        .find(|d| d.get("kind").and_then(Value::as_str) == Some("Deployment"))
        .ok_or("expected a Deployment (kind: Deployment)")?;
    let name = deployment
        .get("metadata")
        .and_then(|m| string(m, "name"))
        .ok_or("the Deployment has no metadata.name")?;
    let spec = deployment.get("spec");
    let labels = |value: Option<&Value>| -> BTreeMap<String, String> {
        value
            .and_then(Value::as_mapping)
            .into_iter()
            .flatten()
            .filter_map(|(k, v)| Some((k.as_str()?.to_string(), v.as_str()?.to_string())))
            .collect()
    };
    let match_labels = labels(
        spec.and_then(|s| s.get("selector"))
            .and_then(|s| s.get("matchLabels")),
    );
    let containers = spec
        .and_then(|s| s.get("template"))
        .and_then(|t| t.get("spec"))
        .and_then(|s| s.get("containers"))
        .and_then(Value::as_sequence)
        .filter(|c| !c.is_empty())
        .ok_or("the Deployment has no spec.template.spec.containers")?;
    let container = containers
        .iter()
        .find(|c| c.get("name").and_then(Value::as_str) == Some("manager"))
        .unwrap_or(&containers[0]);
    Ok(ManagerDeployment {
        name,
        match_labels,
        container: string(container, "name").ok_or("the manager container has no name")?,
        image: string(container, "image").unwrap_or_default(),
        args: strings(container.get("args")),
    })
}

/// What a JSON 6902 patch of the manager Deployment adds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PatchAdds {
    /// Arguments added to a container.
    pub args: Vec<String>,
    /// Volumes added to the pod, by name.
    pub volumes: Vec<String>,
}

/// Reads a JSON 6902 patch (a list of operations); `None` for a strategic-merge patch.
///
/// # Errors
/// Not YAML.
pub fn json_patch(text: &str) -> Result<Option<PatchAdds>, Problem> {
    let Value::Sequence(ops) = yaml(text)? else {
        return Ok(None);
    };
    let mut adds = PatchAdds::default();
    for op in &ops {
        if string(op, "op").as_deref() != Some("add") {
            continue;
        }
        let path = string(op, "path").unwrap_or_default();
        let value = op.get("value");
        if path.contains("/args") {
            match value {
                Some(Value::Sequence(_)) => adds.args.extend(strings(value)),
                Some(v) => adds.args.extend(v.as_str().map(str::to_string)),
                None => {}
            }
        } else if path.ends_with("/volumes/-") || path.contains("/volumes/") {
            adds.volumes.extend(value.and_then(|v| string(v, "name")));
        }
    }
    Ok(Some(adds))
}

/// The kinds and names of the objects of a manifest file.
///
/// # Errors
/// Not YAML.
pub fn objects(text: &str) -> Result<Vec<(String, String)>, Problem> {
    Ok(documents(text)?
        .iter()
        .filter_map(|d| {
            Some((
                string(d, "kind")?,
                d.get("metadata").and_then(|m| string(m, "name"))?,
            ))
        })
        .collect())
}

/// The name of the ClusterRole that may `get` the non-resource URL `/metrics`, if `text`
/// holds one.
///
/// # Errors
/// Not YAML.
pub fn metrics_reader(text: &str) -> Result<Option<String>, Problem> {
    Ok(documents(text)?.iter().find_map(|d| {
        (string(d, "kind").as_deref() == Some("ClusterRole")).then_some(())?;
        let reads = d
            .get("rules")
            .and_then(Value::as_sequence)?
            .iter()
            .any(|rule| {
                strings(rule.get("nonResourceURLs"))
                    .iter()
                    .any(|u| u == "/metrics")
                    && strings(rule.get("verbs"))
                        .iter()
                        .any(|v| v == "get" || v == "*")
            });
        reads.then(|| d.get("metadata").and_then(|m| string(m, "name")))?
    }))
}

/// The resources (plural, without subresources) a ClusterRole or Role of `text` may
/// `create`, other than `skip_groups`' and Events.
///
/// # Errors
/// Not YAML.
pub fn created_resources(text: &str, skip_groups: &[String]) -> Result<Vec<String>, Problem> {
    let mut created = Vec::new();
    for doc in documents(text)? {
        for rule in list(&doc, "rules") {
            let groups = strings(rule.get("apiGroups"));
            if groups.iter().any(|g| skip_groups.contains(g))
                || !strings(rule.get("verbs"))
                    .iter()
                    .any(|v| v == "create" || v == "*")
            {
                continue;
            }
            for resource in strings(rule.get("resources")) {
                if !resource.contains('/')
                    && !["events", "leases", "*"].contains(&resource.as_str())
                    && !created.contains(&resource)
                {
                    created.push(resource);
                }
            }
        }
    }
    Ok(created)
}

/// A value in Go source: a string literal, another expression, or none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GoValue {
    /// A literal (a string's content, or `true`, `false`, a number as written).
    Literal(String),
    /// An expression that is not a literal, as written.
    Expr(String),
    /// Not set.
    Missing,
}

/// A flag `cmd/main.go` defines with the standard `flag` package (or pflag).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GoFlag {
    /// Its name, without dashes.
    pub name: String,
    /// The variable it sets.
    pub var: String,
    /// Its default, as written.
    pub default: String,
}

/// What `cmd/main.go` says about the manager.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MainGo {
    /// `ctrl.Options.LeaderElectionID`.
    pub election_id: GoValue,
    /// `ctrl.Options.LeaderElection`.
    pub leader_election: GoValue,
    /// `ctrl.Options.LeaderElectionNamespace`.
    pub election_namespace: GoValue,
    /// The options of `ctrl.Options` that set lease timings (`LeaseDuration`, …).
    pub timings_set: Vec<String>,
    /// The flags it defines.
    pub flags: Vec<GoFlag>,
    /// `metricsserver.Options.SecureServing`.
    pub secure_serving: GoValue,
    /// Whether metrics are behind controller-runtime's authentication filter.
    pub metrics_auth: bool,
    /// Whether its webhooks are set up unless `ENABLE_WEBHOOKS` is `false`.
    pub webhooks_env: bool,
    /// Whether zap's flags (`--zap-time-encoding`, …) are bound.
    pub zap_flags: bool,
    /// Whether it makes a controller-runtime manager.
    pub controller_runtime: bool,
}

impl MainGo {
    /// The flag that sets `var`.
    pub fn flag_of(&self, var: &str) -> Option<&GoFlag> {
        self.flags.iter().find(|f| f.var == var)
    }

    /// The flag named `name`.
    pub fn flag(&self, name: &str) -> Option<&GoFlag> {
        self.flags.iter().find(|f| f.name == name)
    }
}

static BLOCK_COMMENT: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(?s)/\*.*?\*/").expect("a valid regex"));
static FLAG: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r#"\b(?:flag|pflag|fs|flags|flagset|CommandLine)\.(?:Bool|String|Int|Int64|Duration|Float64|Uint)Var\(\s*&([\w.]+)\s*,\s*"([^"]+)"\s*,\s*([^,]+?)\s*,"#,
    )
    .expect("a valid regex")
});
static STRING_LITERAL: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r#"^"((?:[^"\\]|\\.)*)"$|^`([^`]*)`$"#).expect("a valid regex"));

/// `text` without comments: block comments, and lines that are only a `//` comment.
fn without_comments(text: &str) -> String {
    BLOCK_COMMENT
        .replace_all(text, "")
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The value of the struct field `field:` (the first one), as a literal or the expression.
fn field(code: &str, field: &str) -> GoValue {
    let re = Regex::new(&format!(r"\b{field}\s*:\s*([^,\n}}]+)")).expect("a valid regex");
    let Some(found) = re.captures(code) else {
        return GoValue::Missing;
    };
    let expr = found[1].trim().to_string();
    match STRING_LITERAL.captures(&expr) {
        Some(lit) => GoValue::Literal(
            lit.get(1)
                .or_else(|| lit.get(2))
                .map_or("", |m| m.as_str())
                .to_string(),
        ),
        None if expr == "true" || expr == "false" || expr.chars().all(|c| c.is_ascii_digit()) => {
            GoValue::Literal(expr)
        }
        None => GoValue::Expr(expr),
    }
}

/// Scans `cmd/main.go` (any Go source of a manager's main package).
pub fn main_go(text: &str) -> MainGo {
    let code = without_comments(text);
    let flags = FLAG
        .captures_iter(&code)
        .map(|c| GoFlag {
            var: c[1].to_string(),
            name: c[2].to_string(),
            default: c[3].trim().to_string(),
        })
        .collect();
    MainGo {
        election_id: field(&code, "LeaderElectionID"),
        leader_election: field(&code, "LeaderElection"),
        election_namespace: field(&code, "LeaderElectionNamespace"),
        timings_set: ["LeaseDuration", "RenewDeadline", "RetryPeriod"]
            .into_iter()
            .filter(|f| field(&code, f) != GoValue::Missing)
            .map(str::to_string)
            .collect(),
        flags,
        secure_serving: field(&code, "SecureServing"),
        metrics_auth: code.contains("WithAuthenticationAndAuthorization"),
        webhooks_env: Regex::new(r#"os\.Getenv\(\s*"ENABLE_WEBHOOKS"\s*\)\s*!=\s*"false""#)
            .expect("a valid regex")
            .is_match(&code),
        zap_flags: code.contains("zap.Options") && code.contains(".BindFlags("),
        controller_runtime: code.contains("sigs.k8s.io/controller-runtime"),
    }
}

/// The import paths of the Go source `text` under `module` (`example.org/op/api/v1`).
pub fn module_imports(text: &str, module: &str) -> Vec<String> {
    let re = Regex::new(&format!(r#""({}/[^"]+)""#, regex::escape(module))).expect("a valid regex");
    re.captures_iter(&without_comments(text))
        .map(|c| c[1].to_string())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const PROJECT: &str = "\
domain: example.org
layout:
- go.kubebuilder.io/v4
projectName: shop
repo: example.org/shop
resources:
- controller: true
  group: apps
  kind: Deployment
  path: k8s.io/api/apps/v1
  version: v1
  external: true
- api:
    crdVersion: v1
    namespaced: true
  controller: true
  domain: example.org
  group: cache
  kind: Cart
  version: v1alpha1
version: \"3\"
";

    #[test]
    fn a_project_file_gives_the_name_and_its_own_kinds_first() {
        let p = project(PROJECT).unwrap();
        assert_eq!(p.name, "shop");
        assert_eq!(p.repo.as_deref(), Some("example.org/shop"));
        assert_eq!(p.resources[0].kind, "Cart");
        assert_eq!(p.resources[0].api_version(), "cache.example.org/v1alpha1");
        assert!(p.resources[0].namespaced);
        assert!(!p.resources[1].own_api);
    }

    #[test]
    fn a_project_file_of_another_layout_or_no_yaml_is_refused_saying_what_was_expected() {
        let e =
            project(&PROJECT.replace("go.kubebuilder.io/v4", "helm.sdk.operatorframework.io/v1"))
                .unwrap_err();
        assert!(e.contains("expected go.kubebuilder.io/v4"), "{e}");
        let e = project(&PROJECT.replace("projectName: shop\n", "")).unwrap_err();
        assert_eq!(e, "expected projectName");
        assert!(project("a: [").unwrap_err().starts_with("not YAML"));
        assert!(project("- a").unwrap_err().contains("expected a mapping"));
    }

    #[test]
    fn readers_take_odd_shapes_without_panicking() {
        let p = project("layout: go.kubebuilder.io/v4\nprojectName: x\nresources: 7\n").unwrap();
        assert!(p.resources.is_empty());
        let p =
            project("layout: [go.kubebuilder.io/v4]\nprojectName: x\nresources: [1, {kind: A}]\n")
                .unwrap();
        assert!(p.resources.is_empty(), "{p:?}");
        assert!(project("").is_err());
        let k = kustomization("resources: {a: 1}\npatches: [7, {path: p.yaml}]\nimages: [3]\n")
            .unwrap();
        assert!(k.resources.is_empty());
        assert_eq!(k.patches, ["p.yaml"]);
        assert!(manager_deployment("kind: Deployment\nmetadata: {name: m}\nspec: 3\n").is_err());
        assert!(manager_deployment("---\n---\n").is_err());
        assert_eq!(
            json_patch("- 1\n- {op: add}\n").unwrap(),
            Some(PatchAdds::default())
        );
        assert!(objects("[").is_err());
        let m = main_go("LeaderElectionID: \"unterminated\nflag.BoolVar(&x, \"\", ");
        assert_eq!(m.election_id, GoValue::Expr("\"unterminated".into()));
        assert!(m.flags.is_empty());
    }

    #[test]
    fn a_kustomization_gives_its_namespace_prefix_resources_patches_and_images() {
        let k = kustomization(
            "namespace: shop-system\nnamePrefix: shop-\nresources:\n- ../crd\n#- ../webhook\n\
             - metrics_service.yaml\npatches:\n- path: manager_metrics_patch.yaml\n  target:\n    \
             kind: Deployment\nlabels:\n- includeSelectors: true\n  pairs: {team: a}\n\
             images:\n- name: controller\n  newName: reg/shop\n  newTag: v1\n",
        )
        .unwrap();
        assert_eq!(k.namespace.as_deref(), Some("shop-system"));
        assert_eq!(k.name_prefix, "shop-");
        assert_eq!(k.resources, ["../crd", "metrics_service.yaml"]);
        assert_eq!(k.patches, ["manager_metrics_patch.yaml"]);
        assert_eq!(k.selector_labels["team"], "a");
        assert_eq!(k.images["controller"], "reg/shop:v1");
        assert_eq!(kustomization("").unwrap(), Kustomization::default());
        assert!(
            kustomization("- a")
                .unwrap_err()
                .contains("expected a mapping")
        );
    }

    #[test]
    fn the_manager_deployment_gives_its_selector_container_image_and_arguments() {
        let d = manager_deployment(
            "kind: Namespace\nmetadata: {name: system}\n---\nkind: Deployment\nmetadata: \
             {name: controller-manager}\nspec:\n  selector:\n    matchLabels: {control-plane: \
             controller-manager}\n  template:\n    spec:\n      containers:\n      - name: \
             sidecar\n        image: x\n      - name: manager\n        image: controller:latest\n        \
             args: [--leader-elect]\n",
        )
        .unwrap();
        assert_eq!(d.name, "controller-manager");
        assert_eq!(d.match_labels["control-plane"], "controller-manager");
        assert_eq!(d.container, "manager");
        assert_eq!(d.image, "controller:latest");
        assert_eq!(d.args, ["--leader-elect"]);
        assert_eq!(
            manager_deployment("kind: Service\n").unwrap_err(),
            "expected a Deployment (kind: Deployment)"
        );
    }

    #[test]
    fn a_json_patch_gives_the_arguments_and_volumes_it_adds() {
        let adds = json_patch(
            "- op: add\n  path: /spec/template/spec/containers/0/args/-\n  value: --webhook-port=9443\n\
             - op: add\n  path: /spec/template/spec/volumes/-\n  value: {name: certs}\n",
        )
        .unwrap()
        .unwrap();
        assert_eq!(adds.args, ["--webhook-port=9443"]);
        assert_eq!(adds.volumes, ["certs"]);
        assert_eq!(json_patch("spec: {}").unwrap(), None);
    }

    #[test]
    fn the_role_names_what_the_manager_creates_and_the_metrics_reader() {
        let role = "kind: ClusterRole\nmetadata: {name: manager-role}\nrules:\n\
                    - apiGroups: [apps]\n  resources: [deployments]\n  verbs: [create, get]\n\
                    - apiGroups: [cache.example.org]\n  resources: [carts, carts/status]\n  verbs: [create]\n\
                    - apiGroups: ['']\n  resources: [events, pods]\n  verbs: [create, get]\n";
        assert_eq!(
            created_resources(role, &["cache.example.org".into()]).unwrap(),
            ["deployments", "pods"]
        );
        let reader = "kind: ClusterRole\nmetadata: {name: metrics-reader}\nrules:\n\
                      - nonResourceURLs: [/metrics]\n  verbs: [get]\n";
        assert_eq!(
            metrics_reader(reader).unwrap().as_deref(),
            Some("metrics-reader")
        );
        assert_eq!(metrics_reader(role).unwrap(), None);
    }

    const MAIN: &str = r#"
import (
	"example.org/shop/api/v1"
	"example.org/shop/internal/controller"
)
func main() {
	flag.StringVar(&metricsAddr, "metrics-bind-address", "0", "The address "+
		"the metrics endpoint binds to.")
	flag.BoolVar(&enableLeaderElection, "leader-elect", false,
		"Enable leader election.")
	flag.BoolVar(&secureMetrics, "metrics-secure", true, "Serve securely.")
	opts := zap.Options{Development: true}
	opts.BindFlags(flag.CommandLine)
	metricsServerOptions := metricsserver.Options{
		BindAddress:   metricsAddr,
		SecureServing: secureMetrics,
	}
	metricsServerOptions.FilterProvider = filters.WithAuthenticationAndAuthorization
	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{
		LeaderElection:         enableLeaderElection,
		LeaderElectionID:       "1031f310.example.org",
		// LeaderElectionReleaseOnCancel: true,
	})
	if os.Getenv("ENABLE_WEBHOOKS") != "false" {
	}
}
"#;

    #[test]
    fn main_go_gives_a_literal_election_id_the_flags_and_the_metrics_setup() {
        let m = main_go(MAIN);
        assert_eq!(
            m.election_id,
            GoValue::Literal("1031f310.example.org".into())
        );
        assert_eq!(
            m.leader_election,
            GoValue::Expr("enableLeaderElection".into())
        );
        assert_eq!(
            m.flag_of("enableLeaderElection").unwrap().name,
            "leader-elect"
        );
        assert_eq!(m.flag("metrics-bind-address").unwrap().default, "\"0\"");
        assert_eq!(m.flag("metrics-secure").unwrap().default, "true");
        assert_eq!(m.secure_serving, GoValue::Expr("secureMetrics".into()));
        assert!(m.metrics_auth && m.webhooks_env && m.zap_flags);
        assert!(m.timings_set.is_empty());
        assert_eq!(m.election_namespace, GoValue::Missing);
        assert_eq!(
            module_imports(MAIN, "example.org/shop"),
            [
                "example.org/shop/api/v1",
                "example.org/shop/internal/controller"
            ]
        );
    }

    #[test]
    fn main_go_without_an_election_id_says_it_is_missing() {
        let m = main_go(&MAIN.replace("LeaderElectionID:       \"1031f310.example.org\",", ""));
        assert_eq!(m.election_id, GoValue::Missing);
        let m = main_go(&MAIN.replace(
            "LeaderElectionID:       \"1031f310.example.org\",",
            "// LeaderElectionID: \"commented.example.org\",",
        ));
        assert_eq!(m.election_id, GoValue::Missing);
    }

    #[test]
    fn main_go_with_an_election_id_that_is_no_literal_gives_the_expression() {
        let m = main_go(&MAIN.replace("\"1031f310.example.org\"", "os.Getenv(\"LOCK\")"));
        assert_eq!(m.election_id, GoValue::Expr("os.Getenv(\"LOCK\")".into()));
        let m = main_go(&MAIN.replace("\"1031f310.example.org\"", "electionID"));
        assert_eq!(m.election_id, GoValue::Expr("electionID".into()));
        let m = main_go(&MAIN.replace("\"1031f310.example.org\"", "`raw.example.org`"));
        assert_eq!(m.election_id, GoValue::Literal("raw.example.org".into()));
    }
}

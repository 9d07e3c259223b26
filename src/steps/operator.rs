//! Steps and helpers about the operator under test: finding its binary for the simulator,
//! deploying `operator/config` with the election mode and timings a scenario states.

use std::path::{Path, PathBuf};
use std::process::Command;

use cucumber::{given, then, when};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DynamicObject, ListParams, LogParams, Patch, PatchParams};

use super::wait::eventually;
use serde_json::json;

use super::{Dur, World};
use crate::cluster::Placement;
use crate::deploy::{Manifest, apply_all, read_manifests};

/// The image the manifests name; the simulator runs it as the built operator binary.
pub const OPERATOR_IMAGE: &str = crate::cluster::DEFAULT_OPERATOR_IMAGE;
/// The operator's namespace in its manifests.
pub const OPERATOR_NAMESPACE: &str = crate::cluster::sim::OPERATOR_NAMESPACE;
/// How long the operator's pods tolerate a NotReady or unreachable node before eviction.
pub const NODE_TOLERATION_SECONDS: i64 = 5;
/// The operator's Deployment in its manifests.
pub const OPERATOR_DEPLOYMENT: &str = "memcached-operator";
/// The label selector of the operator's pods.
pub const OPERATOR_SELECTOR: &str = "app.kubernetes.io/name=memcached-operator";
/// The leader-election id in its manifests.
pub const LOCK_NAME: &str = "memcached-operator-lock";

/// Errors of finding or building the operator.
#[derive(Debug, thiserror::Error)]
pub enum OperatorError {
    /// `cargo build -p memcached-operator` failed or could not run.
    #[error("cannot build the operator binary with `cargo build -p memcached-operator`: {0}")]
    Build(String),
    /// A manifest of `operator/config` could not be read.
    #[error("cannot read {path}")]
    Manifest {
        /// The file or directory.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

/// The repository root (where `operator/config` lives).
pub fn repository_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The operator's CustomResourceDefinitions (`operator/config/crd/*.yaml`), as YAML.
///
/// # Errors
/// When the directory or a file cannot be read.
pub fn crd_manifests() -> Result<Vec<String>, OperatorError> {
    let dir = repository_root().join("operator/config/crd");
    let unreadable = |path: &Path| {
        let path = path.to_path_buf();
        move |source| OperatorError::Manifest { path, source }
    };
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map_err(unreadable(&dir))?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.extension().is_some_and(|x| x == "yaml"))
        .collect();
    paths.sort();
    paths
        .iter()
        .map(|path| std::fs::read_to_string(path).map_err(unreadable(path)))
        .collect()
}

/// The operator binary for the simulator: `$OPCONFORM_OPERATOR_BIN`, else the one in the
/// running test executable's profile directory, built with `cargo build` (once per
/// process) when it is missing or older than the operator's sources, so a scenario never
/// runs a stale operator.
///
/// # Errors
/// When it cannot be built.
pub fn operator_binary() -> Result<PathBuf, OperatorError> {
    static BUILT: std::sync::OnceLock<Result<PathBuf, String>> = std::sync::OnceLock::new();
    if let Some(path) = std::env::var_os("OPCONFORM_OPERATOR_BIN") {
        return Ok(PathBuf::from(path));
    }
    BUILT
        .get_or_init(|| {
            // target/<profile>/deps/e2e-… → target/<profile>/memcached-operator
            let exe = std::env::current_exe().map_err(|e| e.to_string())?;
            let profile_dir = exe
                .parent()
                .and_then(|deps| {
                    if deps.file_name().is_some_and(|n| n == "deps") {
                        deps.parent()
                    } else {
                        Some(deps)
                    }
                })
                .map(Path::to_path_buf)
                .ok_or_else(|| "cannot locate the target directory".to_string())?;
            let binary = profile_dir.join("memcached-operator");
            if is_stale(&binary) {
                build_operator(&profile_dir).map_err(|e| e.to_string())?;
            }
            Ok(binary)
        })
        .clone()
        .map_err(OperatorError::Build)
}

/// Whether `binary` is missing or older than a source it is built from (the operator's
/// sources and manifest, or the lock file).
fn is_stale(binary: &Path) -> bool {
    fn newest(path: &Path) -> Option<std::time::SystemTime> {
        let meta = std::fs::metadata(path).ok()?;
        if !meta.is_dir() {
            return meta.modified().ok();
        }
        std::fs::read_dir(path)
            .ok()?
            .filter_map(Result::ok)
            .filter_map(|e| newest(&e.path()))
            .max()
    }
    let Some(built) = std::fs::metadata(binary).and_then(|m| m.modified()).ok() else {
        return true;
    };
    let root = repository_root();
    ["operator/src", "operator/Cargo.toml", "Cargo.lock"]
        .iter()
        .filter_map(|p| newest(&root.join(p)))
        .any(|changed| changed > built)
}

fn build_operator(profile_dir: &Path) -> Result<(), OperatorError> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let release = profile_dir.file_name().is_some_and(|n| n == "release");
    eprintln!(
        "opconform: bringing the operator binary up to date (cargo build -p memcached-operator)…"
    );
    let mut cmd = Command::new(cargo);
    cmd.args([
        "build",
        "-p",
        "memcached-operator",
        "--bin",
        "memcached-operator",
    ])
    .current_dir(repository_root());
    if release {
        cmd.arg("--release");
    }
    if let Some(target) = profile_dir.parent() {
        cmd.env("CARGO_TARGET_DIR", target);
    }
    let status = cmd
        .status()
        .map_err(|e| OperatorError::Build(e.to_string()))?;
    if status.success() {
        Ok(())
    } else {
        Err(OperatorError::Build(format!("exit status {status}")))
    }
}

/// How a scenario runs the operator.
#[derive(Debug, Clone)]
pub struct OperatorSetup {
    /// Replicas of the manager Deployment.
    pub replicas: i32,
    /// Flags after the manifest's own (they win): election mode, timings, …
    pub args: Vec<String>,
}

impl OperatorSetup {
    /// Lease mode with `timings` written `LEASE/RENEW/RETRY` (e.g. `4s/3s/1s`) and
    /// `extra` flags after them.
    ///
    /// # Panics
    /// When the timings are not three durations.
    pub fn lease(replicas: i32, timings: &str, extra: &str) -> Self {
        let parts: Vec<&str> = timings.split('/').collect();
        assert_eq!(
            parts.len(),
            3,
            "timings are LEASE/RENEW/RETRY, e.g. 4s/3s/1s: {timings}"
        );
        for p in &parts {
            p.parse::<Dur>().unwrap_or_else(|e| panic!("{e}"));
        }
        let mut args = vec![
            "--leader-election=lease".to_string(),
            format!("--lease-duration={}", parts[0]),
            format!("--renew-deadline={}", parts[1]),
            format!("--retry-period={}", parts[2]),
        ];
        args.extend(extra.split_whitespace().map(str::to_string));
        Self { replicas, args }
    }

    /// The configured lease duration, when the flags set one.
    pub fn lease_duration(&self) -> Option<std::time::Duration> {
        self.args.iter().find_map(|a| {
            a.strip_prefix("--lease-duration=")
                .and_then(|d| d.parse::<Dur>().ok())
                .map(|d| d.0)
        })
    }
}

/// The manifests to apply, in dependency order (CRD, Namespace, RBAC, manager), placed
/// where the provider says (namespace, cluster-scoped names, image, labels) and with the
/// manager Deployment's replicas and flags set for this scenario.
///
/// # Errors
/// When `operator/config` cannot be read.
pub fn operator_manifests(
    setup: &OperatorSetup,
    placement: &Placement,
) -> Result<Vec<Manifest>, crate::deploy::DeployError> {
    let config = repository_root().join("operator/config");
    let mut manifests = Vec::new();
    for dir in ["crd", "manager", "rbac"] {
        manifests.extend(read_manifests(&config.join(dir))?);
    }
    // The Namespace first, so the RBAC and the Deployment have somewhere to go.
    manifests.sort_by_key(|m| match kind_of(&m.object) {
        "CustomResourceDefinition" => 0,
        "Namespace" => 1,
        "Deployment" => 3,
        _ => 2,
    });
    for m in &mut manifests {
        place(&mut m.object, placement);
        if kind_of(&m.object) == "Deployment" {
            set_manager(&mut m.object, setup, placement);
        }
    }
    Ok(manifests)
}

fn kind_of(object: &DynamicObject) -> &str {
    object.types.as_ref().map_or("", |t| t.kind.as_str())
}

/// Moves an object of the manifests to the placement's namespace and names.
fn place(object: &mut DynamicObject, placement: &Placement) {
    let kind = kind_of(object).to_string();
    if kind == "CustomResourceDefinition" {
        // Cluster-wide and the same for every scenario.
        return;
    }
    let meta = &mut object.metadata;
    if meta.namespace.as_deref() == Some(OPERATOR_NAMESPACE) {
        meta.namespace = Some(placement.namespace.clone());
    }
    if kind == "Namespace" && meta.name.as_deref() == Some(OPERATOR_NAMESPACE) {
        meta.name = Some(placement.namespace.clone());
    }
    if let (true, Some(name)) = (
        matches!(kind.as_str(), "ClusterRole" | "ClusterRoleBinding"),
        &mut meta.name,
    ) {
        name.push_str(&placement.suffix);
    }
    if !placement.labels.is_empty() {
        meta.labels
            .get_or_insert_with(Default::default)
            .extend(placement.labels.clone());
    }
    // `get_mut`, not indexing: `data["x"]` on a missing key would insert `x: null`, a field
    // kube-apiserver's server-side apply refuses ("field not declared in schema").
    if kind == "ClusterRoleBinding"
        && let Some(role_ref) = object.data.get_mut("roleRef")
        && role_ref["kind"] == "ClusterRole"
        && let Some(name) = role_ref["name"].as_str().map(str::to_string)
    {
        role_ref["name"] = json!(format!("{name}{}", placement.suffix));
    }
    if let Some(subjects) = object
        .data
        .get_mut("subjects")
        .and_then(serde_json::Value::as_array_mut)
    {
        for subject in subjects {
            if subject["namespace"] == OPERATOR_NAMESPACE {
                subject["namespace"] = json!(placement.namespace);
            }
        }
    }
}

fn set_manager(deployment: &mut DynamicObject, setup: &OperatorSetup, placement: &Placement) {
    let spec = &mut deployment.data["spec"];
    spec["replicas"] = json!(setup.replicas);
    // Evicted 5 s after their node goes NotReady or unreachable, instead of the API
    // server's default 300 s, so that node scenarios take seconds.
    let pod_spec = &mut spec["template"]["spec"];
    let mut tolerations = pod_spec["tolerations"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for key in [
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
    ] {
        tolerations.retain(|t| t["key"] != key);
        tolerations.push(json!({
            "key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": NODE_TOLERATION_SECONDS
        }));
    }
    pod_spec["tolerations"] = json!(tolerations);
    let container = &mut spec["template"]["spec"]["containers"][0];
    container["image"] = json!(placement.image);
    let mut args: Vec<String> = container["args"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    let mut flags = Vec::new();
    if !placement.watch_namespaces.is_empty() {
        flags.push(format!(
            "--watch-namespace={}",
            placement.watch_namespaces.join(",")
        ));
    }
    flags.extend(setup.args.iter().cloned());
    for flag in flags {
        let name = flag.split('=').next().unwrap_or(&flag).to_string();
        args.retain(|a| a.split('=').next() != Some(name.as_str()));
        args.push(flag);
    }
    container["args"] = json!(args);
}

/// Deploys the operator into the scenario's cluster.
///
/// # Panics
/// When the manifests cannot be read or applied (the step fails with the reason).
pub async fn deploy(world: &mut World, setup: OperatorSetup) {
    world.start_recorder();
    let placement = world.provider().expect("cluster").placement();
    let manifests = operator_manifests(&setup, &placement).expect("operator/config is readable");
    let client = world.client().expect("cluster");
    apply_all(&client, &manifests, None)
        .await
        .unwrap_or_else(|e| {
            panic!(
                "deploying operator/config failed: {}",
                crate::steps::chain(&e)
            )
        });
    world.note(&format!(
        "deployed memcached-operator: {} replicas, {}",
        setup.replicas,
        setup.args.join(" ")
    ));
    world.operator = Some(setup);
}

#[given(
    expr = "the memcached operator is deployed with {int} replica(s) in lease mode with timings {word}"
)]
async fn deployed_lease(world: &mut World, replicas: i32, timings: String) {
    let setup = OperatorSetup::lease(replicas, &timings, "");
    world.lease_duration = setup.lease_duration();
    deploy(world, setup).await;
}

#[given(
    expr = "the memcached operator is deployed with {int} replica(s) in lease mode with timings {word} and flags {string}"
)]
async fn deployed_lease_with_flags(
    world: &mut World,
    replicas: i32,
    timings: String,
    flags: String,
) {
    let setup = OperatorSetup::lease(replicas, &timings, &flags);
    world.lease_duration = setup.lease_duration();
    deploy(world, setup).await;
}

#[given(
    expr = "the memcached operator is deployed with {int} replica(s) in lease mode with timings {word} and no right to leases"
)]
async fn deployed_without_lease_rights(world: &mut World, replicas: i32, timings: String) {
    world.start_recorder();
    let setup = OperatorSetup::lease(replicas, &timings, "");
    let placement = world.provider().expect("cluster").placement();
    let mut manifests =
        operator_manifests(&setup, &placement).expect("operator/config is readable");
    for m in &mut manifests {
        if kind_of(&m.object) == "Role"
            && let Some(rules) = m.object.data["rules"].as_array_mut()
        {
            rules.retain(|r| r["apiGroups"] != json!(["coordination.k8s.io"]));
        }
    }
    apply(world, &manifests).await;
    world.note("deployed memcached-operator without rights to leases");
    world.lease_duration = setup.lease_duration();
    world.operator = Some(setup);
}

#[when("the operator's Role is given its rights to leases")]
async fn lease_rights_restored(world: &mut World) {
    let setup = world.operator.clone().expect("the operator was deployed");
    let placement = world.provider().expect("cluster").placement();
    let roles: Vec<Manifest> = operator_manifests(&setup, &placement)
        .expect("operator/config is readable")
        .into_iter()
        .filter(|m| kind_of(&m.object) == "Role")
        .collect();
    apply(world, &roles).await;
    world.note("the operator's Role has its rights to leases again");
}

#[given(
    expr = "a second operator {string} is deployed with {int} replica(s) in lease mode with timings {word} and the same lock"
)]
async fn second_operator(world: &mut World, instance: String, replicas: i32, timings: String) {
    let setup = OperatorSetup::lease(replicas, &timings, "");
    let placement = world.provider().expect("cluster").placement();
    let mut deployment = operator_manifests(&setup, &placement)
        .expect("operator/config is readable")
        .into_iter()
        .find(|m| kind_of(&m.object) == "Deployment")
        .expect("operator/config has the manager Deployment");
    let object = &mut deployment.object;
    let name = format!(
        "{}-{instance}",
        object.metadata.name.clone().unwrap_or_default()
    );
    object.metadata.name = Some(name.clone());
    let spec = &mut object.data["spec"];
    spec["selector"]["matchLabels"]["app.kubernetes.io/instance"] = json!(instance);
    spec["template"]["metadata"]["labels"]["app.kubernetes.io/instance"] = json!(instance);
    apply(world, &[deployment]).await;
    world.note(&format!(
        "deployed a second operator {name} with the same lock"
    ));
}

async fn apply(world: &World, manifests: &[Manifest]) {
    let client = world.client().expect("cluster");
    apply_all(&client, manifests, None)
        .await
        .unwrap_or_else(|e| {
            panic!(
                "applying operator/config failed: {}",
                crate::steps::chain(&e)
            )
        });
}

#[then(expr = "within {duration} every operator pod has failed with {string}")]
async fn pods_fail_with(world: &mut World, within: Dur, message: String) {
    let namespace = world.operator_namespace().expect("cluster");
    let pods: Api<Pod> = Api::namespaced(world.client().expect("cluster"), &namespace);
    let what = format!("every operator pod exited with {message:?} in its log");
    eventually(within.0, &what, || {
        let (pods, message) = (&pods, &message);
        async move {
            let list = pods
                .list(&ListParams::default().labels(OPERATOR_SELECTOR))
                .await
                .map_err(|e| format!("listing the operator pods: {e}"))?;
            let mut failed = 0;
            let mut seen = Vec::new();
            for pod in &list.items {
                let name = pod.metadata.name.clone().unwrap_or_default();
                let exited = pod
                    .status
                    .as_ref()
                    .and_then(|s| s.container_statuses.as_ref())
                    .is_some_and(|cs| {
                        cs.iter().any(|c| {
                            c.restart_count > 0
                                || c.state.as_ref().is_some_and(|s| s.terminated.is_some())
                        })
                    });
                let log = logs_of(pods, &name).await;
                if exited && log.contains(message.as_str()) {
                    failed += 1;
                }
                seen.push(format!(
                    "{name} (exited: {exited}): {}",
                    log.lines().last().unwrap_or("")
                ));
            }
            if !list.items.is_empty() && failed == list.items.len() {
                Ok(())
            } else {
                Err(format!("{seen:?}"))
            }
        }
    })
    .await;
}

/// The logs of `pod`: its previous container's (when it restarted) and its current one's.
async fn logs_of(pods: &Api<Pod>, pod: &str) -> String {
    let previous = LogParams {
        previous: true,
        ..LogParams::default()
    };
    let before = pods.logs(pod, &previous).await.unwrap_or_default();
    let now = pods
        .logs(pod, &LogParams::default())
        .await
        .unwrap_or_default();
    before + &now
}

#[then(expr = "within {duration} an operator pod logs {string}")]
async fn pod_logs(world: &mut World, within: Dur, text: String) {
    let namespace = world.operator_namespace().expect("cluster");
    let pods: Api<Pod> = Api::namespaced(world.client().expect("cluster"), &namespace);
    let what = format!("an operator pod logs {text:?}");
    eventually(within.0, &what, || {
        let (pods, text) = (&pods, &text);
        async move {
            let list = pods
                .list(&ListParams::default().labels(OPERATOR_SELECTOR))
                .await
                .map_err(|e| format!("listing the operator pods: {e}"))?;
            let mut names = Vec::new();
            for pod in &list.items {
                let name = pod.metadata.name.clone().unwrap_or_default();
                if logs_of(pods, &name).await.contains(text.as_str()) {
                    return Ok(());
                }
                names.push(name);
            }
            Err(format!("not in the logs of {names:?}"))
        }
    })
    .await;
}

#[then(expr = "within {duration} the old leader logs {string}")]
async fn old_leader_logs(world: &mut World, within: Dur, text: String) {
    let old = world
        .remembered
        .get("old leader")
        .cloned()
        .expect("a step saw another replica take over before this one");
    let namespace = world.operator_namespace().expect("cluster");
    let pods: Api<Pod> = Api::namespaced(world.client().expect("cluster"), &namespace);
    let what = format!("{old} logs {text:?}");
    eventually(within.0, &what, || {
        let (pods, old, text) = (&pods, &old, &text);
        async move {
            let log = logs_of(pods, old).await;
            if log.contains(text.as_str()) {
                Ok(())
            } else {
                let tail: Vec<&str> = log.lines().rev().take(3).collect();
                Err(format!("its last lines: {tail:?}"))
            }
        }
    })
    .await;
}

#[then("there is no lease")]
async fn no_lease(world: &mut World) {
    let namespace = world.operator_namespace().expect("cluster");
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(world.client().expect("cluster"), &namespace);
    let list = leases
        .list(&ListParams::default())
        .await
        .expect("listing leases");
    assert!(
        list.items.is_empty(),
        "expected no Lease in {namespace}, found {:?}",
        list.items
            .iter()
            .map(|l| l.metadata.name.clone())
            .collect::<Vec<_>>()
    );
}

#[when("the operator Deployment is rolled out again")]
async fn rolled_out_again(world: &mut World) {
    let namespace = world.operator_namespace().expect("cluster");
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(world.client().expect("cluster"), &namespace);
    let patch = json!({"spec": {"template": {"metadata": {"annotations": {
        "opconform.io/restartedAt": chrono::Utc::now().to_rfc3339()
    }}}}});
    world.provider().expect("cluster").faults().record(
        "rollout",
        &format!("deployment {namespace}/memcached-operator"),
        "",
    );
    deployments
        .patch(
            "memcached-operator",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await
        .unwrap_or_else(|e| panic!("restarting the operator Deployment failed: {e}"));
}

#[then(expr = "within {duration} the operator Deployment is rolled out")]
async fn rolled_out(world: &mut World, within: Dur) {
    let namespace = world.operator_namespace().expect("cluster");
    crate::deploy::wait_for_rollout(
        &world.client().expect("cluster"),
        &namespace,
        "memcached-operator",
        within.0,
    )
    .await
    .unwrap_or_else(|e| panic!("{}", crate::steps::chain(&e)));
}

#[given(expr = "the memcached operator is deployed with {int} replica(s) and the flags {string}")]
async fn deployed_with_flags(world: &mut World, replicas: i32, flags: String) {
    let args = flags.split_whitespace().map(str::to_string).collect();
    deploy(world, OperatorSetup { replicas, args }).await;
}

#[when(expr = "the operator is scaled to {int} replica(s)")]
async fn operator_scaled(world: &mut World, replicas: i32) {
    let namespace = world.operator_namespace().expect("cluster");
    Api::<Deployment>::namespaced(world.client().expect("cluster"), &namespace)
        .patch(
            OPERATOR_DEPLOYMENT,
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "replicas": replicas } })),
        )
        .await
        .unwrap_or_else(|e| panic!("scaling the operator to {replicas} failed: {e}"));
    world.note(&format!("scaled the operator to {replicas} replicas"));
}

#[then(expr = "within {duration} the operator has no pods")]
async fn no_operator_pods(world: &mut World, within: Dur) {
    let namespace = world.operator_namespace().expect("cluster");
    let pods: Api<Pod> = Api::namespaced(world.client().expect("cluster"), &namespace);
    eventually(within.0, "no operator pod exists", || async {
        let list = pods
            .list(&ListParams::default().labels(OPERATOR_SELECTOR))
            .await
            .map_err(|e| format!("listing the operator's pods: {e}"))?;
        let names: Vec<String> = list
            .items
            .into_iter()
            .filter_map(|p| p.metadata.name)
            .collect();
        if names.is_empty() {
            Ok(())
        } else {
            Err(format!("pods {names:?}"))
        }
    })
    .await;
}

#[given(expr = "the memcached operator is deployed with {int} replica(s) in for-life mode")]
async fn deployed_for_life(world: &mut World, replicas: i32) {
    deploy(
        world,
        OperatorSetup {
            replicas,
            args: vec!["--leader-election=for-life".into()],
        },
    )
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_manager_gets_the_scenarios_replicas_and_flags_replacing_its_own() {
        let setup = OperatorSetup {
            replicas: 3,
            args: vec!["--leader-election=lease".into(), "--retry-period=1s".into()],
        };
        let sim = Placement {
            namespace: OPERATOR_NAMESPACE.into(),
            suffix: String::new(),
            image: OPERATOR_IMAGE.into(),
            watch_namespaces: Vec::new(),
            labels: Default::default(),
        };
        let manifests = operator_manifests(&setup, &sim).unwrap();
        let kinds: Vec<String> = manifests
            .iter()
            .map(|m| m.object.types.as_ref().unwrap().kind.clone())
            .collect();
        assert_eq!(
            kinds.first().map(String::as_str),
            Some("CustomResourceDefinition")
        );
        assert_eq!(kinds.last().map(String::as_str), Some("Deployment"));
        let deployment = &manifests.last().unwrap().object;
        assert_eq!(deployment.data["spec"]["replicas"], 3);
        let args = deployment.data["spec"]["template"]["spec"]["containers"][0]["args"]
            .as_array()
            .unwrap()
            .clone();
        assert!(args.contains(&json!("--leader-election=lease")));
        assert!(!args.contains(&json!("--leader-election=for-life")));
        assert!(args.contains(&json!("--metrics-bind-address=$(POD_IP):8080")));
    }

    #[test]
    fn on_a_shared_cluster_every_object_moves_to_the_scenarios_namespace_and_names() {
        let setup = OperatorSetup {
            replicas: 2,
            args: vec![],
        };
        let placement = crate::cluster::kubeconfig::shared_placement("opconform-x1", "op:1");
        let manifests = operator_manifests(&setup, &placement).unwrap();
        for m in &manifests {
            let o = &m.object;
            let text = serde_json::to_string(o).unwrap();
            assert!(
                !text.contains(OPERATOR_NAMESPACE),
                "{} still names {OPERATOR_NAMESPACE}: {text}",
                kind_of(o)
            );
            match kind_of(o) {
                "CustomResourceDefinition" => {}
                "ClusterRole" | "ClusterRoleBinding" => {
                    assert!(o.metadata.name.as_ref().unwrap().ends_with("-opconform-x1"));
                    assert_eq!(
                        o.metadata.labels.as_ref().unwrap()["opconform.io/scenario"],
                        "opconform-x1"
                    );
                }
                _ => assert_eq!(
                    o.metadata.labels.as_ref().unwrap()["opconform.io/scenario"],
                    "opconform-x1"
                ),
            }
            // Nothing the manifest does not have: server-side apply refuses unknown fields.
            let fields = o.data.as_object().unwrap();
            if !matches!(kind_of(o), "ClusterRoleBinding" | "RoleBinding") {
                assert!(
                    !fields.contains_key("roleRef") && !fields.contains_key("subjects"),
                    "{} gained binding fields: {text}",
                    kind_of(o)
                );
            }
            assert!(
                fields.values().all(|v| !v.is_null()),
                "{} has a null field: {text}",
                kind_of(o)
            );
            if kind_of(o) == "ClusterRoleBinding" {
                assert!(
                    o.data["roleRef"]["name"]
                        .as_str()
                        .unwrap()
                        .ends_with("-opconform-x1")
                );
            }
        }
        let deployment = &manifests.last().unwrap().object;
        let container = &deployment.data["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(container["image"], "op:1");
        assert!(container["args"].as_array().unwrap().contains(&json!(
            "--watch-namespace=opconform-x1-default,opconform-x1-team-a,opconform-x1-team-b"
        )));
    }
}

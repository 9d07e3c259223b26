//! Steps and helpers about the operator under test: finding its binary for the simulator,
//! deploying `operator/config` with the election mode and timings a scenario states.

use std::path::{Path, PathBuf};
use std::process::Command;

use cucumber::given;
use kube::api::DynamicObject;
use serde_json::json;

use super::{Dur, World};
use crate::deploy::{Manifest, apply_all, read_manifests};

/// The image the manifests name; the simulator runs it as the built operator binary.
pub const OPERATOR_IMAGE: &str = "memcached-operator:dev";
/// The operator's namespace in its manifests.
pub const OPERATOR_NAMESPACE: &str = "memcached-operator-system";
/// The leader-election id in its manifests.
pub const LOCK_NAME: &str = "memcached-operator-lock";

/// Errors of finding or building the operator.
#[derive(Debug, thiserror::Error)]
pub enum OperatorError {
    /// `cargo build -p memcached-operator` failed or could not run.
    #[error("cannot build the operator binary with `cargo build -p memcached-operator`: {0}")]
    Build(String),
}

/// The repository root (where `operator/config` lives).
pub fn repository_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The operator binary for the simulator: `$OPCONFORM_OPERATOR_BIN`, else the one next to
/// the running test executable's profile directory, building it when missing.
///
/// # Errors
/// When it is missing and cannot be built.
pub fn operator_binary() -> Result<PathBuf, OperatorError> {
    if let Some(path) = std::env::var_os("OPCONFORM_OPERATOR_BIN") {
        return Ok(PathBuf::from(path));
    }
    // target/<profile>/deps/e2e-… → target/<profile>/memcached-operator
    let exe = std::env::current_exe().map_err(|e| OperatorError::Build(e.to_string()))?;
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
        .ok_or_else(|| OperatorError::Build("cannot locate the target directory".into()))?;
    let binary = profile_dir.join("memcached-operator");
    if !binary.is_file() {
        build_operator(&profile_dir)?;
    }
    Ok(binary)
}

fn build_operator(profile_dir: &Path) -> Result<(), OperatorError> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let release = profile_dir.file_name().is_some_and(|n| n == "release");
    eprintln!("opconform: building the operator binary (cargo build -p memcached-operator)…");
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

/// The manifests to apply, in dependency order (CRD, RBAC, manager), with the manager
/// Deployment's replicas and election flags set for this scenario.
///
/// # Errors
/// When `operator/config` cannot be read.
pub fn operator_manifests(
    setup: &OperatorSetup,
) -> Result<Vec<Manifest>, crate::deploy::DeployError> {
    let config = repository_root().join("operator/config");
    let mut manifests = Vec::new();
    for dir in ["crd", "manager", "rbac"] {
        manifests.extend(read_manifests(&config.join(dir))?);
    }
    // The Namespace first, so the RBAC and the Deployment have somewhere to go.
    manifests.sort_by_key(|m| {
        m.object
            .types
            .as_ref()
            .map(|t| match t.kind.as_str() {
                "CustomResourceDefinition" => 0,
                "Namespace" => 1,
                "Deployment" => 3,
                _ => 2,
            })
            .unwrap_or(2)
    });
    for m in &mut manifests {
        if m.object
            .types
            .as_ref()
            .is_some_and(|t| t.kind == "Deployment")
        {
            set_manager(&mut m.object, setup);
        }
    }
    Ok(manifests)
}

fn set_manager(deployment: &mut DynamicObject, setup: &OperatorSetup) {
    let spec = &mut deployment.data["spec"];
    spec["replicas"] = json!(setup.replicas);
    let container = &mut spec["template"]["spec"]["containers"][0];
    let mut args: Vec<String> = container["args"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    for flag in &setup.args {
        let name = flag.split('=').next().unwrap_or(flag);
        args.retain(|a| a.split('=').next() != Some(name));
        args.push(flag.clone());
    }
    container["args"] = json!(args);
}

/// Deploys the operator into the scenario's cluster.
///
/// # Panics
/// When the manifests cannot be read or applied (the step fails with the reason).
pub async fn deploy(world: &mut World, setup: OperatorSetup) {
    world.start_recorder();
    let manifests = operator_manifests(&setup).expect("operator/config is readable");
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
    expr = "the memcached operator is deployed with {int} replicas in lease mode with timings {word}"
)]
async fn deployed_lease(world: &mut World, replicas: i32, timings: String) {
    let parts: Vec<&str> = timings.split('/').collect();
    assert_eq!(
        parts.len(),
        3,
        "timings are LEASE/RENEW/RETRY, e.g. 4s/3s/1s: {timings}"
    );
    for p in &parts {
        p.parse::<Dur>().unwrap_or_else(|e| panic!("{e}"));
    }
    deploy(
        world,
        OperatorSetup {
            replicas,
            args: vec![
                "--leader-election=lease".into(),
                format!("--lease-duration={}", parts[0]),
                format!("--renew-deadline={}", parts[1]),
                format!("--retry-period={}", parts[2]),
            ],
        },
    )
    .await;
    world.lease_duration = parts[0].parse::<Dur>().ok().map(|d| d.0);
}

#[given(expr = "the memcached operator is deployed with {int} replicas in for-life mode")]
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
        let manifests = operator_manifests(&setup).unwrap();
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
}

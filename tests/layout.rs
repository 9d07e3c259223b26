//! The direction of the workspace's crates, as `cargo metadata` reads the manifests: the
//! simulator's crates never depend on the harness, and the simulated API server knows
//! nothing of the nodes and controllers that are its clients.

use std::collections::BTreeMap;
use std::process::Command;

use serde_json::Value;

/// Every workspace package with the names of all its dependencies (normal, dev and build).
fn workspace_dependencies() -> BTreeMap<String, Vec<String>> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let out = Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let metadata: Value = serde_json::from_slice(&out.stdout).expect("cargo metadata prints JSON");
    metadata["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .map(|package| {
            let name = package["name"].as_str().expect("name").to_string();
            let dependencies = package["dependencies"]
                .as_array()
                .expect("dependencies")
                .iter()
                .map(|d| d["name"].as_str().expect("dependency name").to_string())
                .collect();
            (name, dependencies)
        })
        .collect()
}

#[test]
fn the_simulator_crates_are_in_the_workspace() {
    let packages = workspace_dependencies();
    for name in ["sim-apiserver", "sim-node", "sim-controllers", "opconform"] {
        assert!(packages.contains_key(name), "{name} missing: {packages:?}");
    }
}

#[test]
fn no_simulator_crate_depends_on_the_harness() {
    for (name, dependencies) in workspace_dependencies() {
        if name.starts_with("sim-") {
            assert!(
                !dependencies.iter().any(|d| d == "opconform"),
                "{name} depends on the harness: {dependencies:?}"
            );
        }
    }
}

#[test]
fn the_simulated_api_server_depends_on_no_other_workspace_crate() {
    let packages = workspace_dependencies();
    let dependencies = &packages["sim-apiserver"];
    for other in packages.keys().filter(|p| *p != "sim-apiserver") {
        assert!(
            !dependencies.contains(other),
            "sim-apiserver depends on {other}: {dependencies:?}"
        );
    }
}

#[test]
fn the_bundled_operator_depends_on_nothing_of_ours() {
    let packages = workspace_dependencies();
    let dependencies = &packages["memcached-operator"];
    for ours in packages.keys().filter(|p| *p != "memcached-operator") {
        assert!(
            !dependencies.contains(ours),
            "memcached-operator depends on {ours}: {dependencies:?}"
        );
    }
}

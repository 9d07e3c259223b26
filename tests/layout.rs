//! The direction of the workspace's crates, as `cargo metadata` reads the manifests: the
//! simulator's crates never depend on the harness, and the simulated API server knows
//! nothing of the nodes and controllers that are its clients. Within each crate, the
//! modules import each other one way only: no cycle, as the sources name their paths.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use regex::Regex;
use serde_json::Value;

/// Every workspace package with the names of all its dependencies (normal, dev and build).
fn workspace_dependencies() -> BTreeMap<String, Vec<String>> {
    dependencies_of_kinds(&["normal", "dev", "build"])
}

/// Every workspace package with the names of its dependencies of these kinds (`normal`
/// is what `cargo metadata` leaves unnamed).
fn dependencies_of_kinds(kinds: &[&str]) -> BTreeMap<String, Vec<String>> {
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
                .filter(|d| kinds.contains(&d["kind"].as_str().unwrap_or("normal")))
                .map(|d| d["name"].as_str().expect("dependency name").to_string())
                .collect();
            (name, dependencies)
        })
        .collect()
}

#[test]
fn the_simulator_crates_are_in_the_workspace() {
    let packages = workspace_dependencies();
    for name in [
        "cluster-vocabulary",
        "opconform-providers",
        "opconform-steps",
        "sim-apiserver",
        "sim-node",
        "sim-controllers",
        "sim-test-support",
        "opconform-core",
        "opconform",
    ] {
        assert!(packages.contains_key(name), "{name} missing: {packages:?}");
    }
}

#[test]
fn no_simulator_crate_depends_on_the_harness() {
    for (name, dependencies) in workspace_dependencies() {
        if name.starts_with("sim-") || name == "cluster-vocabulary" {
            assert!(
                !dependencies
                    .iter()
                    .any(|d| d == "opconform" || d == "opconform-core"),
                "{name} depends on the harness: {dependencies:?}"
            );
        }
    }
}

/// The crates of the workspace that `name` depends on.
fn ours_among(packages: &BTreeMap<String, Vec<String>>, name: &str) -> Vec<String> {
    packages[name]
        .iter()
        .filter(|d| packages.contains_key(*d))
        .cloned()
        .collect()
}

/// Its tests' helpers (`sim-test-support`, a dev-dependency) count too: they start the
/// API server alone, the controllers only behind a feature its tests leave off. The pod
/// network is how it dials a pod (`pods/proxy`, `pods/portforward`).
#[test]
fn the_simulated_api_server_uses_no_workspace_crate_but_the_vocabulary_plain_http_and_the_pod_network()
 {
    let packages = workspace_dependencies();
    assert_eq!(
        ours_among(&packages, "sim-apiserver"),
        [
            "cluster-vocabulary",
            "plain-http",
            "pod-network",
            "sim-test-support"
        ]
    );
}

#[test]
fn the_shared_vocabulary_depends_on_no_workspace_crate() {
    let packages = workspace_dependencies();
    assert_eq!(
        ours_among(&packages, "cluster-vocabulary"),
        Vec::<String>::new()
    );
}

/// The simulator's crates a harness crate might reach for.
const SIMULATOR: [&str; 3] = ["sim-apiserver", "sim-node", "sim-controllers"];

#[test]
fn among_the_harness_crates_only_the_providers_use_the_simulator() {
    let packages = workspace_dependencies();
    assert!(
        SIMULATOR
            .iter()
            .all(|sim| packages["opconform-providers"].iter().any(|d| d == sim)),
        "the providers assemble the simulated cluster: {:?}",
        packages["opconform-providers"]
    );
    for harness in ["opconform-core", "opconform-steps", "opconform"] {
        let used: Vec<_> = packages[harness]
            .iter()
            .filter(|d| SIMULATOR.contains(&d.as_str()))
            .collect();
        assert!(
            used.is_empty(),
            "{harness} uses the simulator's crates {used:?}"
        );
    }
}

#[test]
fn the_steps_reach_clusters_through_the_providers_and_never_the_binary() {
    let packages = workspace_dependencies();
    assert_eq!(
        ours_among(&packages, "opconform-steps"),
        ["opconform-core", "opconform-providers"]
    );
}

/// The pod network is how any part of this process dials a pod's address (the recorder's
/// scrapes): it knows nothing of providers or the simulator.
#[test]
fn the_core_knows_no_provider_and_no_simulator_crate() {
    let packages = workspace_dependencies();
    assert_eq!(
        ours_among(&packages, "opconform-core"),
        ["cluster-vocabulary", "plain-http", "pod-network"]
    );
}

#[test]
fn the_plain_http_client_depends_on_no_workspace_crate_but_the_pod_network() {
    let packages = workspace_dependencies();
    assert_eq!(ours_among(&packages, "plain-http"), ["pod-network"]);
}

#[test]
fn the_pod_network_depends_on_no_workspace_crate() {
    let packages = workspace_dependencies();
    assert_eq!(ours_among(&packages, "pod-network"), Vec::<String>::new());
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

/// The example operator is shaped as an operator's own repository: what it builds uses
/// nothing of ours, and only its test runs it on the simulator.
#[test]
fn the_example_workloads_operator_builds_on_nothing_of_ours() {
    let built = dependencies_of_kinds(&["normal", "build"]);
    assert_eq!(
        ours_among(&built, "workloads-operator"),
        Vec::<String>::new()
    );
    let all = workspace_dependencies();
    assert!(
        ours_among(&all, "workloads-operator").contains(&"opconform".to_string()),
        "its test runs it with opconform: {:?}",
        all["workloads-operator"]
    );
}

/// The module path of every `.rs` file under a crate's `src`, to its file.
fn modules(src: &Path) -> BTreeMap<Vec<String>, PathBuf> {
    let mut found = BTreeMap::new();
    let mut dirs = vec![src.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("read src dir") {
            let path = entry.expect("dir entry").path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let relative = path
                    .strip_prefix(src)
                    .expect("under src")
                    .with_extension("");
                let mut module: Vec<String> = relative
                    .iter()
                    .map(|part| part.to_string_lossy().into_owned())
                    .collect();
                if matches!(
                    module.last().map(String::as_str),
                    Some("mod" | "lib" | "main")
                ) {
                    module.pop();
                }
                found.insert(module, path);
            }
        }
    }
    found
}

/// The other modules of the crate that one file's code (comments and its `tests` module
/// left out) names through `crate::`, `super::` or `self::` paths, parents and children
/// excepted: a module always reaches its parent and its children.
fn imports(
    module: &[String],
    path: &Path,
    all: &BTreeMap<Vec<String>, PathBuf>,
) -> BTreeSet<Vec<String>> {
    let text = std::fs::read_to_string(path).expect("read source");
    let code = match text.find("#[cfg(test)]\nmod tests") {
        Some(at) => &text[..at],
        None => &text[..],
    };
    let code: String = code
        .lines()
        .filter(|line| !line.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n");
    let path_expr =
        Regex::new(r"\b(crate|self|(?:super::)+)((?:::)?[a-z_][a-z0-9_]*(?:::[a-z_][a-z0-9_]*)*)")
            .expect("regex");
    let mut found = BTreeSet::new();
    for capture in path_expr.captures_iter(&code) {
        let start = &capture[1];
        let rest: Vec<String> = capture[2]
            .trim_start_matches("::")
            .split("::")
            .map(str::to_string)
            .collect();
        // The module a relative path starts from: `self` is this module, each `super`
        // one level up (a non-mod.rs file's own module counts as a level).
        let mut target = match start {
            "crate" => Vec::new(),
            "self" => module.to_vec(),
            supers => {
                let levels = supers.matches("super::").count();
                module[..module.len().saturating_sub(levels)].to_vec()
            }
        };
        target.extend(rest);
        while !target.is_empty() && !all.contains_key(&target) {
            target.pop();
        }
        let related = target.starts_with(module) || module.starts_with(&target);
        if !related {
            found.insert(target);
        }
    }
    found
}

/// A cycle among a crate's modules, if there is one.
fn module_cycle(src: &Path) -> Option<Vec<Vec<String>>> {
    let all = modules(src);
    let edges: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = all
        .iter()
        .map(|(module, path)| (module.clone(), imports(module, path, &all)))
        .collect();
    // Depth-first search; a module met again on the current path closes a cycle.
    fn visit(
        module: &Vec<String>,
        edges: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
        path: &mut Vec<Vec<String>>,
        done: &mut BTreeSet<Vec<String>>,
    ) -> Option<Vec<Vec<String>>> {
        if let Some(at) = path.iter().position(|m| m == module) {
            let mut cycle = path[at..].to_vec();
            cycle.push(module.clone());
            return Some(cycle);
        }
        if done.contains(module) {
            return None;
        }
        path.push(module.clone());
        for next in edges.get(module).into_iter().flatten() {
            if let Some(cycle) = visit(next, edges, path, done) {
                return Some(cycle);
            }
        }
        path.pop();
        done.insert(module.clone());
        None
    }
    let mut done = BTreeSet::new();
    for module in edges.keys() {
        if let Some(cycle) = visit(module, &edges, &mut Vec::new(), &mut done) {
            return Some(cycle);
        }
    }
    None
}

#[test]
fn no_two_modules_of_a_crate_import_each_other_even_through_others() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for src in [
        "src",
        "crates/core/src",
        "crates/providers/src",
        "crates/steps/src",
        "crates/vocabulary/src",
        "crates/plain-http/src",
        "crates/pod-network/src",
        "crates/oci-image/src",
        "crates/sim-apiserver/src",
        "crates/sim-node/src",
        "crates/sim-controllers/src",
        "crates/sim-test-support/src",
        "operator/src",
    ] {
        if let Some(cycle) = module_cycle(&root.join(src)) {
            let names: Vec<String> = cycle.iter().map(|m| m.join("::")).collect();
            panic!("{src}: modules import each other: {}", names.join(" → "));
        }
    }
}

#[test]
fn a_cycle_between_two_sibling_modules_is_found() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    std::fs::write(src.join("lib.rs"), "mod a;\nmod b;\n").unwrap();
    std::fs::write(src.join("a.rs"), "use super::b::B;\npub struct A;\n").unwrap();
    std::fs::write(
        src.join("b.rs"),
        "// crate::a in a comment does not count\npub struct B(crate::a::A);\n",
    )
    .unwrap();
    let cycle = module_cycle(src).expect("the cycle a → b → a");
    assert_eq!(cycle.len(), 3, "{cycle:?}");
    std::fs::write(src.join("b.rs"), "pub struct B;\n").unwrap();
    assert_eq!(module_cycle(src), None);
}

/// The step library reaches a cluster through the `Provider` trait and the factory of
/// `cluster` alone: no step names a provider's module or a simulator crate.
#[test]
fn the_steps_name_no_provider_module_and_no_simulator_crate() {
    let providers = Regex::new(
        r"\bcluster::(sim|sim_parts|local|kind|kubeconfig|admission|audit)\b|crate::sim\b|\bsim_(apiserver|node|controllers)\b",
    )
    .expect("regex");
    let steps = Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/steps/src/steps");
    let mut found = Vec::new();
    for entry in std::fs::read_dir(&steps).expect("read crates/steps/src/steps") {
        let path = entry.expect("dir entry").path();
        let text = std::fs::read_to_string(&path).expect("read a step module");
        for (number, line) in text.lines().enumerate() {
            if providers.is_match(line) {
                found.push(format!("{}:{}: {line}", path.display(), number + 1));
            }
        }
    }
    assert!(
        found.is_empty(),
        "steps reach around the Provider trait:\n{}",
        found.join("\n")
    );
}

/// One module style: a module with submodules is a folder with a `mod.rs`, never a file
/// beside a folder of the same name.
#[test]
fn no_module_is_a_file_beside_a_folder_of_the_same_name() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut dirs: Vec<PathBuf> = ["src", "crates", "operator", "subjects"]
        .iter()
        .map(|d| root.join(d))
        .collect();
    let mut both = Vec::new();
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("read a source dir") {
            let path = entry.expect("dir entry").path();
            if path.is_dir() && path.file_name().is_some_and(|n| n != "target") {
                if path.with_extension("rs").is_file() {
                    both.push(path.display().to_string());
                }
                dirs.push(path);
            }
        }
    }
    assert!(
        both.is_empty(),
        "modules that are a file and a folder (make them folder/mod.rs): {both:?}"
    );
}

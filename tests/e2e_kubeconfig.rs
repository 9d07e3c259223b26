//! The kubeconfig provider needs nothing but a kubeconfig: the feature suite runs against
//! a separately started `opconform sim` process, reached only through the kubeconfig it
//! writes (and its audit log file), as it would against any running cluster. Scenarios
//! that need access to the nodes or API faults are left out by the provider.
//!
//! Then, on the same cluster, `opconform test` with a profile that does not match it (its
//! manifests hold a kind the cluster does not serve): the run fails naming the manifest,
//! the kind and the profile key to change. After each run the cluster holds nothing of it:
//! no scenario namespace, no labelled cluster-scoped object, not the CustomResourceDefinition
//! the run brought.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use opconform::cluster::ProviderKind;
use opconform::cluster::kubeconfig::KubeconfigOptions;
use opconform::steps::{Suite, run_suite};
use opconform::subject::Subject;

mod support;

/// The `opconform sim` child, stopped whatever happens.
struct Sim(Child);

impl Drop for Sim {
    fn drop(&mut self) {
        support::stop_child(&mut self.0);
    }
}

fn start_sim(dir: &Path) -> Sim {
    let subject = Subject::memcached();
    let operator = subject.binary().expect("the operator binary");
    let child = Command::new(env!("CARGO_BIN_EXE_opconform"))
        .arg("sim")
        .arg("--fast")
        .arg("--kubeconfig")
        .arg(dir.join("kubeconfig"))
        .arg("--audit-log")
        .arg(dir.join("audit.jsonl"))
        .arg("--image")
        .arg(format!("{}={}", subject.image, operator.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .expect("opconform sim starts");
    let sim = Sim(child);
    // The kubeconfig is written once the cluster serves.
    let deadline = Instant::now() + Duration::from_secs(60);
    while !dir.join("kubeconfig").is_file() {
        assert!(
            Instant::now() < deadline,
            "opconform sim wrote no kubeconfig within 60s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    sim
}

#[tokio::main]
async fn main() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let sim = start_sim(dir.path());
    let suite = Suite {
        subject: Subject::memcached(),
        provider: ProviderKind::Kubeconfig,
        kubeconfig: KubeconfigOptions {
            kubeconfig: Some(dir.path().join("kubeconfig")),
            context: None,
            image: None,
            audit_log: Some(dir.path().join("audit.jsonl")),
        },
        reports: opconform::report::reports_root().join("kubeconfig"),
    };
    let features = opconform::features::gather(&[]).expect("the shipped features");
    let outcome = run_suite(features, suite, None).await;
    let kubeconfig = dir.path().join("kubeconfig");
    nothing_left(&kubeconfig, "the feature suite").await;
    a_profile_that_does_not_match_the_cluster_fails_naming_why_and_leaves_nothing(
        dir.path(),
        &kubeconfig,
    )
    .await;
    drop(sim);
    assert!(
        !outcome.scenarios.is_empty(),
        "the kubeconfig provider ran no scenario"
    );
    if outcome.failed {
        std::process::exit(1);
    }
}

/// Waits (bounded) until the cluster holds no scenario namespace, no object of any
/// cluster-scoped kind carrying a scenario's label, and not the operator's
/// CustomResourceDefinition, which `opconform sim` does not have before a run applies it.
async fn nothing_left(kubeconfig: &Path, after: &str) {
    use k8s_openapi::api::core::v1::Namespace;
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::api::{Api, ListParams};
    let config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(kubeconfig).expect("the sim's kubeconfig"),
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .expect("a client config");
    let client = kube::Client::try_from(config).expect("a client");
    let labelled = ListParams::default().labels("opconform.io/scenario");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let mut left = Vec::new();
        let names = |items: Vec<String>, what: &str| {
            items
                .into_iter()
                .map(|n| format!("{what} {n}"))
                .collect::<Vec<_>>()
        };
        let namespaces: Api<Namespace> = Api::all(client.clone());
        let list = namespaces
            .list(&ListParams::default())
            .await
            .expect("namespaces");
        left.extend(names(
            list.items
                .into_iter()
                .filter_map(|n| n.metadata.name)
                .filter(|n| n.starts_with("opconform-"))
                .collect(),
            "Namespace",
        ));
        let roles: Api<ClusterRole> = Api::all(client.clone());
        left.extend(names(
            roles
                .list(&labelled)
                .await
                .expect("cluster roles")
                .items
                .into_iter()
                .filter_map(|r| r.metadata.name)
                .collect(),
            "ClusterRole",
        ));
        let bindings: Api<ClusterRoleBinding> = Api::all(client.clone());
        left.extend(names(
            bindings
                .list(&labelled)
                .await
                .expect("bindings")
                .items
                .into_iter()
                .filter_map(|r| r.metadata.name)
                .collect(),
            "ClusterRoleBinding",
        ));
        let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
        left.extend(names(
            crds.list(&ListParams::default())
                .await
                .expect("crds")
                .items
                .into_iter()
                .filter_map(|c| c.metadata.name)
                .filter(|n| n == "memcacheds.cache.example.com")
                .collect(),
            "CustomResourceDefinition",
        ));
        if left.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "60s after {after}, the cluster still holds {}",
            left.join(", ")
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The bundled operator's profile with one more manifest directory, `certs`, holding a
/// cert-manager Certificate: a kind `opconform sim` does not serve.
async fn a_profile_that_does_not_match_the_cluster_fails_naming_why_and_leaves_nothing(
    dir: &Path,
    kubeconfig: &Path,
) {
    let repository = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = dir.join("mismatched/config");
    for sub in ["crd", "rbac", "manager"] {
        let to = config.join(sub);
        std::fs::create_dir_all(&to).unwrap();
        for file in std::fs::read_dir(repository.join("operator/config").join(sub)).unwrap() {
            let file = file.unwrap();
            std::fs::copy(file.path(), to.join(file.file_name())).unwrap();
        }
    }
    std::fs::create_dir_all(config.join("certs")).unwrap();
    std::fs::write(
        config.join("certs/serving-cert.yaml"),
        "apiVersion: cert-manager.io/v1\nkind: Certificate\nmetadata:\n  name: serving-cert\n  \
         namespace: memcached-operator-system\nspec:\n  secretName: webhook-server-cert\n",
    )
    .unwrap();
    let bundled =
        std::fs::read_to_string(repository.join("profiles/memcached-operator/profile.yaml"))
            .unwrap();
    let profile = bundled
        .replace("dir: ../../operator/config", "dir: config")
        .replace(
            "apply: [crd, manager, rbac]",
            "apply: [crd, rbac, certs, manager]",
        )
        .replace(
            "workspace: ../..",
            &format!("workspace: {}", repository.display()),
        )
        .replace(
            "objects: work/cache.yaml",
            &format!(
                "objects: {}",
                repository
                    .join("profiles/memcached-operator/work/cache.yaml")
                    .display()
            ),
        );
    assert_ne!(profile, bundled, "the bundled profile's keys moved");
    let profile_path = dir.join("mismatched/profile.yaml");
    std::fs::write(&profile_path, profile).unwrap();
    let feature = dir.join("mismatched/deploy.feature");
    std::fs::write(
        &feature,
        "Feature: Deploy\n  Scenario: The operator is deployed\n    Given a cluster\n    \
         And the operator is deployed with 1 replica in lease mode with timings 4s/3s/1s\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_opconform"))
        .current_dir(dir.join("mismatched"))
        .env("KUBECONFIG", kubeconfig)
        .args([
            "test",
            "--provider",
            "kubeconfig",
            "--operator",
            "profile.yaml",
            "deploy.feature",
        ])
        .output()
        .expect("opconform test runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    for expected in [
        "(deploy.feature:4)",
        "they hold a cert-manager.io/v1 Certificate (",
        "mismatched/config/certs/serving-cert.yaml) that this cluster does not serve",
        "leave it out with the profile's leaveOut (kinds: [Certificate])",
    ] {
        assert!(stderr.contains(expected), "{expected:?} not in:\n{stderr}");
    }
    nothing_left(
        kubeconfig,
        "the run of a profile that does not match the cluster",
    )
    .await;
}

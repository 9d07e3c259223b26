//! The local provider's Kubernetes version and feature gates on the command line:
//! `--kubernetes` and `--feature-gates` of `opconform test` and `opconform conformance`,
//! refused with other providers, and a profile that elects through coordinated leader
//! election. Nothing here starts a control plane.

use assert_cmd::Command;
use opconform::cli::{LocalOptionError, local_options};
use opconform::cluster::ProviderKind;
use opconform::cluster::local::KubernetesVersion;

fn opconform() -> Command {
    Command::new(assert_cmd::cargo::cargo_bin!("opconform"))
}

#[test]
fn a_minor_on_local_chooses_its_known_patch_and_the_gates_are_read() {
    let options = local_options(
        ProviderKind::Local,
        Some("1.37"),
        Some("CoordinatedLeaderElection=true"),
        None,
    )
    .unwrap()
    .unwrap();
    assert_eq!(options.version().full(), "v1.37.2");
    assert_eq!(
        options.feature_gates.get("CoordinatedLeaderElection"),
        Some(&true)
    );
}

#[test]
fn without_options_local_runs_the_pinned_version_with_no_gates() {
    let options = local_options(ProviderKind::Local, None, None, None)
        .unwrap()
        .unwrap();
    assert_eq!(options.kubernetes, None);
    assert_eq!(options.version(), KubernetesVersion::pinned());
    assert!(options.feature_gates.is_empty());
    assert_eq!(
        local_options(ProviderKind::Sim, None, None, None).unwrap(),
        None
    );
}

#[test]
fn an_unknown_version_is_an_error_listing_the_known_ones() {
    let e = local_options(ProviderKind::Local, Some("1.30"), None, None).unwrap_err();
    let chain = opconform::error_chain(&e);
    assert!(chain.starts_with("--kubernetes \"1.30\": unknown Kubernetes version \"1.30\": expected one of 1.32 (v1.32.13), 1.33 (v1.33.13), 1.34 (v1.34.4), 1.35 (v1.35.4), 1.36 (v1.36.3), 1.37 (v1.37.2)"), "{chain}");
}

#[test]
fn the_local_options_are_refused_with_other_providers_naming_the_option() {
    for provider in [
        ProviderKind::Sim,
        ProviderKind::Kind,
        ProviderKind::Kubeconfig,
    ] {
        let e = local_options(provider, Some("1.37"), None, None).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "--kubernetes chooses the Kubernetes version of the local provider's control plane: the {} provider cannot; expected --provider local, or no --kubernetes",
                provider.name()
            )
        );
        let e = local_options(provider, None, Some("A=true"), None).unwrap_err();
        assert!(
            matches!(
                e,
                LocalOptionError::NotLocal {
                    option: "--feature-gates",
                    ..
                }
            ),
            "{e}"
        );
    }
}

#[test]
fn a_coordinated_profile_turns_the_gate_on_locally_and_is_refused_elsewhere() {
    let options = local_options(ProviderKind::Local, None, Some("Other=false"), Some("op"))
        .unwrap()
        .unwrap();
    assert_eq!(
        opconform::cluster::local::versions::feature_gates_arg(&options.feature_gates),
        "CoordinatedLeaderElection=true,Other=false"
    );
    let e = local_options(ProviderKind::Sim, None, None, Some("op")).unwrap_err();
    assert!(
        e.to_string().starts_with("the profile of op sets election.coordinated, which needs kube-apiserver's CoordinatedLeaderElection feature gate: the sim provider cannot set feature gates"),
        "{e}"
    );
    let e = local_options(
        ProviderKind::Local,
        None,
        Some("CoordinatedLeaderElection=false"),
        Some("op"),
    )
    .unwrap_err();
    assert!(
        matches!(e, LocalOptionError::CoordinatedTurnedOff { .. }),
        "{e}"
    );
}

/// Runs opconform with `args` and `--out` an empty directory; checks that it fails (exit
/// 1) saying `says` on stderr, and that nothing ran (the directory stays empty).
fn refused_before_running(args: &[&str], says: &str) {
    let dir = tempfile::tempdir().unwrap();
    let out = opconform()
        .args(args)
        .arg("--out")
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(says), "{stderr}");
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "nothing ran"
    );
}

#[test]
fn opconform_test_on_sim_refuses_a_kubernetes_version_before_running_anything() {
    refused_before_running(
        &["test", "lease", "--provider", "sim", "--kubernetes", "1.37"],
        "error: --kubernetes chooses the Kubernetes version of the local provider's control plane: the sim provider cannot",
    );
}

#[test]
fn opconform_conformance_refuses_an_unknown_version_in_its_list_before_running_anything() {
    refused_before_running(
        &[
            "conformance",
            "--provider",
            "local",
            "--kubernetes",
            "1.34,1.29",
        ],
        "error: --kubernetes \"1.34,1.29\": unknown Kubernetes version \"1.29\": expected one of 1.32 (v1.32.13)",
    );
    refused_before_running(
        &["conformance", "--provider", "kind", "--kubernetes", "1.34"],
        "error: --kubernetes chooses the Kubernetes versions of the local provider's control plane: the kind provider cannot",
    );
}

/// A profile whose operator elects through coordinated leader election; nothing it names
/// needs to exist for the runs that never start it.
const COORDINATED: &str = "
name: coordinated
namespace: op-system
deployment: op-manager
podSelector: {app: op}
metrics: {port: 8080}
lock: {kind: Lease, name: op-lock}
election:
  coordinated: true
  lease: [--elect=lease, '--lease={leaseDuration}', '--renew={renewDeadline}', '--retry={retryPeriod}']
image: op:dev
binary: {path: bin/op}
manifests: {dir: config, apply: [rbac, manager]}
";

#[test]
fn a_coordinated_profile_is_a_not_applicable_column_of_a_table_on_sim_and_an_error_of_a_test() {
    let dir = tempfile::tempdir().unwrap();
    let profile = dir.path().join("coordinated.profile.yaml");
    std::fs::write(&profile, COORDINATED).unwrap();
    let out = dir.path().join("table");
    let run = opconform()
        .args(["conformance", "--provider", "sim", "--out"])
        .arg(&out)
        .arg(&profile)
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("conformance.json")).unwrap())
            .unwrap();
    let why = json["subjects"][0]["notApplicable"].as_str().unwrap();
    assert!(
        why.ends_with(
            "CoordinatedLeaderElection feature gate, and the sim provider cannot set feature gates"
        ),
        "{why}"
    );
    let run = opconform()
        .args(["test", "lease", "--provider", "sim", "--operator"])
        .arg(&profile)
        .arg("--out")
        .arg(dir.path().join("reports"))
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        stderr.contains("error: the profile of coordinated sets election.coordinated, which needs kube-apiserver's CoordinatedLeaderElection feature gate: the sim provider cannot set feature gates; expected --provider local"),
        "{stderr}"
    );
}

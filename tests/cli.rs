//! The `opconform` command line: help, clear errors on bad input.

use assert_cmd::Command;

fn opconform() -> Command {
    Command::new(assert_cmd::cargo::cargo_bin!("opconform"))
}

#[test]
fn help_lists_the_subcommands() {
    let out = opconform().arg("--help").output().unwrap();
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for word in ["sim", "fault"] {
        assert!(help.contains(word), "{help}");
    }
}

#[test]
fn sim_refuses_a_kubeconfig_path_it_cannot_write_and_names_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("missing-dir").join("kubeconfig");
    let out = opconform()
        .args(["sim", "--kubeconfig"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("cannot write kubeconfig {}", path.display())),
        "{stderr}"
    );
}

#[test]
fn fault_without_a_readable_kubeconfig_says_which_file() {
    let out = opconform()
        .args([
            "fault",
            "--kubeconfig",
            "/nonexistent/opconform.kubeconfig",
            "list",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("cannot use kubeconfig /nonexistent/opconform.kubeconfig"),
        "{stderr}"
    );
}

#[test]
fn an_unknown_subcommand_is_a_usage_error() {
    let out = opconform().arg("frobnicate").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn profile_check_describes_the_shipped_profile_and_names_the_bad_key_of_another() {
    let shipped = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/profiles/memcached-operator/profile.yaml"
    );
    let out = opconform()
        .args(["profile", "check", shipped])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("lock Lease memcached-operator-system/memcached-operator-lock"),
        "{stdout}"
    );

    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("profile.yaml");
    let text = std::fs::read_to_string(shipped)
        .unwrap()
        .replace("metrics: {port: 8080}", "metrics: {port: 0}");
    std::fs::write(&bad, text).unwrap();
    let out = opconform()
        .args(["profile", "check"])
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "operator profile {}: metrics.port: expected a port from 1 to 65535",
            bad.display()
        )),
        "{stderr}"
    );
}

/// A user's own feature, one scenario that holds and one whose step is undefined.
const USER_FEATURE: &str = "\
Feature: My operator keeps one leader
  Background:
    Given a cluster

  Scenario: A leader is elected
    Given the operator is deployed with 3 replicas in lease mode with timings 4s/3s/1s
    Then within 30s exactly one replica leads
    And there was never more than one leader

  @undefined
  Scenario: A step nobody wrote
    Then the operator sings
";

#[test]
fn test_runs_a_users_own_feature_from_its_directory_and_writes_the_reports() {
    let project = tempfile::tempdir().unwrap();
    std::fs::write(project.path().join("leader.feature"), USER_FEATURE).unwrap();
    let out_dir = project.path().join("reports");
    let out = opconform()
        .current_dir(project.path())
        .args([
            "test",
            "--tags",
            "not @undefined",
            "--junit",
            "junit.xml",
            "--out",
        ])
        .arg(&out_dir)
        .arg("leader.feature")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(stdout.contains("1 scenario (1 passed)"), "{stdout}");
    let suite = std::fs::read_to_string(out_dir.join("suite.json")).unwrap();
    assert!(suite.contains("A leader is elected"), "{suite}");
    assert!(out_dir.join("index.html").is_file());
    let junit = std::fs::read_to_string(project.path().join("junit.xml")).unwrap();
    assert!(junit.contains("leader.feature"), "{junit}");
}

#[test]
fn test_fails_with_exit_code_1_naming_the_users_file_and_line_of_a_failed_step() {
    let project = tempfile::tempdir().unwrap();
    std::fs::write(project.path().join("leader.feature"), USER_FEATURE).unwrap();
    let out = opconform()
        .current_dir(project.path())
        .args(["test", "--tags", "@undefined", "--out"])
        .arg(project.path().join("reports"))
        .arg("leader.feature")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("Then the operator sings (leader.feature:12)"),
        "{stderr}"
    );
    assert!(stderr.contains("1 of 1 scenarios failed"), "{stderr}");
}

#[test]
fn test_refuses_what_names_no_feature_and_a_bad_tag_expression_naming_each() {
    let out = opconform().args(["test", "leases"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("\"leases\" is neither a feature file, a directory, nor a shipped feature")
            && stderr.contains("lease, for-life, reconcile, finalizers"),
        "{stderr}"
    );
    let out = opconform()
        .args(["test", "--tags", "@lease and", "lease"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--tags \"@lease and\": not a tag expression"),
        "{stderr}"
    );
}

#[test]
fn a_partial_yaml_that_does_not_match_fails_naming_each_field_that_differs() {
    let project = tempfile::tempdir().unwrap();
    let feature = "\
Feature: Wrong expectations
  Scenario: The Deployment is not what the feature says
    Given a cluster
    And the operator is deployed with 1 replica and the flags \"--leader-election=none\"
    When these objects are applied:
      \"\"\"
      apiVersion: cache.example.com/v1alpha1
      kind: Memcached
      metadata:
        name: cache
      spec:
        size: 2
      \"\"\"
    Then within 30s the Deployment \"cache\" is owned by the Memcached \"cache\"
    And within 2s these objects match:
      \"\"\"
      apiVersion: apps/v1
      kind: Deployment
      metadata:
        name: cache
        labels:
          tier: gold
      spec:
        replicas: 5
      \"\"\"
";
    std::fs::write(project.path().join("wrong.feature"), feature).unwrap();
    let out = opconform()
        .current_dir(project.path())
        .args(["test", "--out"])
        .arg(project.path().join("reports"))
        .arg("wrong.feature")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("expected within 2s: Deployment cache match; last observed:")
            && stderr
                .contains("Deployment cache .metadata.labels.tier: missing, expected \"gold\"")
            && stderr.contains("Deployment cache .spec.replicas: expected 5, found 2"),
        "{stderr}"
    );
}

#[test]
fn test_refuses_a_feature_that_is_not_gherkin_and_a_doc_string_that_is_not_yaml_naming_their_lines()
{
    let project = tempfile::tempdir().unwrap();
    std::fs::write(
        project.path().join("broken.feature"),
        "Feature: Broken\n  Scenario: A step without its keyword\n    Given a cluster\n    \
         the operator is deployed\n",
    )
    .unwrap();
    let out = opconform()
        .current_dir(project.path())
        .args(["test", "broken.feature"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(
            "broken.feature:4:5: not valid Gherkin: \"the operator is deployed\" begins with no \
             keyword: expected Feature"
        ),
        "{stderr}"
    );
    // Refused before anything ran: no report.
    assert!(!project.path().join("opconform/reports").exists());

    std::fs::write(
        project.path().join("yaml.feature"),
        "Feature: Malformed YAML\n  Scenario: A flow sequence never closed\n    Given a cluster\n    \
         When these objects are applied:\n      \"\"\"\n      apiVersion: v1\n      kind: ConfigMap\n      \
         metadata:\n        name: [oops\n      \"\"\"\n",
    )
    .unwrap();
    let out = opconform()
        .current_dir(project.path())
        .args(["test", "yaml.feature"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("When these objects are applied: (yaml.feature:4)")
            && stderr.contains(
                "document 1 of the step's doc string is not YAML: did not find expected ',' or \
                 ']' at line 10 of the feature file, while parsing a flow sequence at line 9 of \
                 the feature file"
            ),
        "{stderr}"
    );
    assert!(
        project
            .path()
            .join("opconform/reports/suite.json")
            .is_file()
    );
}

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

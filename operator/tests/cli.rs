//! The binary's command line: flags, configuration errors, exit codes, and a SIGTERM shutdown.
//!
//! No cluster is needed: configuration errors happen before any API request, and the
//! shutdown test points the operator at an address where nothing listens.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command as StdCommand, Stdio};
use std::time::{Duration, Instant};

use assert_cmd::Command;

const BIN: &str = env!("CARGO_BIN_EXE_memcached-operator");
const SA_NAMESPACE_FILE: &str = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";

/// The operator with a clean environment: not in a cluster unless a test says so.
fn operator() -> Command {
    let mut cmd = Command::new(BIN);
    for var in [
        "POD_NAME",
        "POD_NAMESPACE",
        "WATCH_NAMESPACE",
        "KUBECONFIG",
        "KUBERNETES_SERVICE_HOST",
        "RUST_LOG",
    ] {
        cmd.env_remove(var);
    }
    cmd.timeout(Duration::from_secs(30));
    cmd
}

/// Tests that assume "not in a cluster" cannot run inside a pod.
fn outside_a_pod() -> bool {
    let outside = !Path::new(SA_NAMESPACE_FILE).exists();
    if !outside {
        eprintln!("skipped: this machine has a service-account namespace file");
    }
    outside
}

fn stderr_of(cmd: &mut Command) -> (Option<i32>, String) {
    let out = cmd.output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn help_documents_every_flag() {
    let out = operator().arg("--help").output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let help = String::from_utf8_lossy(&out.stdout);
    for flag in [
        "--leader-election ",
        "--leader-election-id",
        "--leader-election-namespace",
        "--lease-duration",
        "--renew-deadline",
        "--retry-period",
        "--release-on-cancel",
        "--standby",
        "--write-guard",
        "--metrics-bind-address",
        "--health-probe-bind-address",
        "--watch-namespace",
        "--max-concurrent-reconciles",
        "--resync-period",
        "--log-format",
    ] {
        assert!(
            help.contains(flag),
            "--help does not mention {flag}:\n{help}"
        );
    }
    for value in [
        "for-life",
        "lease",
        "none",
        "watch",
        "poll",
        "WATCH_NAMESPACE",
        "memcached-operator-lock",
        "0.0.0.0:8080",
        "0.0.0.0:8081",
        "json",
    ] {
        assert!(
            help.contains(value),
            "--help does not mention {value}:\n{help}"
        );
    }
}

#[test]
fn lease_duration_not_above_renew_deadline_exits_2_naming_the_rule() {
    let (code, err) = stderr_of(operator().args([
        "--leader-election",
        "lease",
        "--leader-election-namespace",
        "ns",
        "--lease-duration",
        "10s",
        "--renew-deadline",
        "10s",
    ]));
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("--lease-duration (10s) must be greater than --renew-deadline (10s)"),
        "{err}"
    );
}

#[test]
fn renew_deadline_not_above_jittered_retry_period_exits_2_naming_the_rule() {
    let (code, err) = stderr_of(operator().args([
        "--leader-election",
        "lease",
        "--leader-election-namespace",
        "ns",
        "--renew-deadline",
        "2s",
        "--retry-period",
        "2s",
    ]));
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("must be greater than 1.2 × --retry-period"),
        "{err}"
    );
}

#[test]
fn a_zero_duration_exits_2_naming_the_flag() {
    let (code, err) = stderr_of(operator().args([
        "--leader-election",
        "lease",
        "--leader-election-namespace",
        "ns",
        "--retry-period",
        "0s",
    ]));
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("--retry-period must be greater than zero"),
        "{err}"
    );
}

#[test]
fn a_negative_duration_exits_2() {
    let (code, err) = stderr_of(operator().args(["--lease-duration=-5s"]));
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("--lease-duration") && err.contains("negative"),
        "{err}"
    );
}

#[test]
fn an_unknown_election_mode_exits_2_listing_the_modes() {
    let (code, err) = stderr_of(operator().args(["--leader-election", "raft"]));
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("raft")
            && err.contains("for-life")
            && err.contains("lease")
            && err.contains("none"),
        "{err}"
    );
}

#[test]
fn an_unknown_standby_or_write_guard_mode_exits_2() {
    assert_eq!(
        stderr_of(operator().args(["--standby", "sleep"])).0,
        Some(2)
    );
    assert_eq!(
        stderr_of(operator().args(["--write-guard", "maybe"])).0,
        Some(2)
    );
}

#[test]
fn for_life_in_a_cluster_without_pod_name_exits_2_naming_the_downward_api_fix() {
    let (code, err) = stderr_of(operator().env("POD_NAMESPACE", "operators"));
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("POD_NAME")
            && err.contains("Downward API")
            && err.contains("fieldPath: metadata.name"),
        "{err}"
    );
}

#[test]
fn lease_outside_a_cluster_exits_2_asking_for_the_namespace_flag() {
    if !outside_a_pod() {
        return;
    }
    let (code, err) = stderr_of(operator().args(["--leader-election", "lease"]));
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("not running in a cluster: set --leader-election-namespace"),
        "{err}"
    );
}

#[test]
fn json_logs_carry_configuration_errors_as_json_lines() {
    if !outside_a_pod() {
        return;
    }
    let (code, err) =
        stderr_of(operator().args(["--leader-election", "lease", "--log-format", "json"]));
    assert_eq!(code, Some(2));
    let line = err
        .lines()
        .find(|l| l.contains("not running in a cluster"))
        .expect(&err);
    let v: serde_json::Value = serde_json::from_str(line).expect(line);
    assert_eq!(v["level"], "ERROR");
    assert_eq!(v["exit_code"], 2);
}

#[test]
fn without_any_kubernetes_configuration_it_exits_1() {
    let home = tempfile::tempdir().unwrap();
    let (code, err) = stderr_of(
        operator()
            .env("HOME", home.path())
            .env("KUBECONFIG", home.path().join("missing"))
            .args(["--leader-election", "none"]),
    );
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("failed to build a kubernetes client"), "{err}");
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn get(port: u16, path: &str) -> Option<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    Some(out)
}

/// A kubeconfig for a server where nothing listens.
fn dead_kubeconfig(dir: &Path) -> std::path::PathBuf {
    let port = free_port();
    let path = dir.join("kubeconfig");
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: http://127.0.0.1:{port}\n\
             contexts:\n- name: c\n  context:\n    cluster: c\n    user: u\ncurrent-context: c\nusers:\n- name: u\n  user:\n    token: t\n"
        ),
    )
    .unwrap();
    path
}

#[test]
fn every_replica_serves_probes_and_metrics_and_sigterm_exits_0() {
    let dir = tempfile::tempdir().unwrap();
    let (metrics, probes) = (free_port(), free_port());
    let mut child = StdCommand::new(BIN)
        .env_remove("POD_NAME")
        .env_remove("POD_NAMESPACE")
        .env_remove("WATCH_NAMESPACE")
        .env("KUBECONFIG", dead_kubeconfig(dir.path()))
        .args([
            "--leader-election",
            "none",
            "--metrics-bind-address",
            &format!("127.0.0.1:{metrics}"),
            "--health-probe-bind-address",
            &format!("127.0.0.1:{probes}"),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();

    let deadline = Instant::now() + Duration::from_secs(20);
    let healthz = loop {
        if let Some(r) = get(probes, "/healthz") {
            break r;
        }
        assert!(
            Instant::now() < deadline,
            "the probe endpoint never came up"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(healthz.starts_with("HTTP/1.1 200"), "{healthz}");
    assert!(get(probes, "/readyz").unwrap().starts_with("HTTP/1.1 200"));
    let m = get(metrics, "/metrics").unwrap();
    assert!(
        m.contains(
            "controller_runtime_reconcile_total{controller=\"memcached\",result=\"success\"} 0"
        ),
        "{m}"
    );

    let status = StdCommand::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let deadline = Instant::now() + Duration::from_secs(25);
    let code = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s.code();
        }
        assert!(
            Instant::now() < deadline,
            "no exit within the grace period after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("received SIGTERM"), "{err}");
}

//! `opconform bench` end to end: every row measured twice for ours and for its anchor (the
//! controller-runtime or operator-lib subject) or peer (an election crate's subject), the
//! pod start rows once (30 pods as containers and as host processes), a well-formed table,
//! JSON with every sample, and the SVG chart. Asserts nothing about the
//! numbers themselves: the bench reports, it does not judge.

use assert_cmd::Command;
use serde_json::Value;

fn opconform() -> Command {
    Command::new(assert_cmd::cargo::cargo_bin!("opconform"))
}

/// controller-runtime's subject, as the table names it.
const CONTROLLER_RUNTIME: &str = "controller-runtime v0.22.5";

/// operator-lib's subject, as the table names it.
const OPERATOR_LIB: &str = "operator-lib v0.19.0";

/// The peers in the API and memory rows, as the table names them.
const KUBE_LEADER_ELECTION: &str = "kube-leader-election 0.44.0";
const KUBE_LEASE_MANAGER: &str = "kube-lease-manager 0.13.1";

/// Every row of the table, in order, with its id in the JSON and what its anchor line
/// starts with.
const ROWS: [(&str, &str, &str); 25] = [
    (
        "lease-release",
        "lease handoff after graceful release",
        CONTROLLER_RUNTIME,
    ),
    (
        "lease-kill",
        "lease takeover after kill, from the kill",
        CONTROLLER_RUNTIME,
    ),
    (
        "lease-kill-expiry",
        "lease takeover after kill, from expiry",
        CONTROLLER_RUNTIME,
    ),
    (
        "for-life",
        "for-life takeover after GC of the lock",
        OPERATOR_LIB,
    ),
    (
        "api-standby",
        "API requests per standby per minute",
        CONTROLLER_RUNTIME,
    ),
    (
        "api-leader",
        "API requests per leader per minute",
        CONTROLLER_RUNTIME,
    ),
    (
        "rss-standby",
        "RSS of a standby with 3 Memcached",
        CONTROLLER_RUNTIME,
    ),
    (
        "rss-leader",
        "RSS of the leader with 3 Memcached",
        CONTROLLER_RUNTIME,
    ),
    (
        "api-standby-kube-leader-election",
        "API requests per standby per minute, beside kube-leader-election",
        KUBE_LEADER_ELECTION,
    ),
    (
        "api-leader-kube-leader-election",
        "API requests per leader per minute, beside kube-leader-election",
        KUBE_LEADER_ELECTION,
    ),
    (
        "rss-standby-kube-leader-election",
        "RSS of a standby, beside kube-leader-election with 3 Memcached",
        KUBE_LEADER_ELECTION,
    ),
    (
        "rss-leader-kube-leader-election",
        "RSS of the leader, beside kube-leader-election with 3 Memcached",
        KUBE_LEADER_ELECTION,
    ),
    (
        "api-standby-kube-lease-manager",
        "API requests per standby per minute, beside kube-lease-manager",
        KUBE_LEASE_MANAGER,
    ),
    (
        "api-leader-kube-lease-manager",
        "API requests per leader per minute, beside kube-lease-manager",
        KUBE_LEASE_MANAGER,
    ),
    (
        "rss-standby-kube-lease-manager",
        "RSS of a standby, beside kube-lease-manager with 3 Memcached",
        KUBE_LEASE_MANAGER,
    ),
    (
        "rss-leader-kube-lease-manager",
        "RSS of the leader, beside kube-lease-manager with 3 Memcached",
        KUBE_LEASE_MANAGER,
    ),
    (
        "start-first-request",
        "sim cluster start to first served request",
        "anchor (n/a)",
    ),
    (
        "start-nodes-ready",
        "sim cluster start to 3 nodes Ready",
        "anchor (n/a)",
    ),
    (
        "start-real",
        "cluster start: sim (3 nodes Ready) vs real control plane (every component ready)",
        "anchor (real)",
    ),
    (
        "start-kind",
        "cluster start: sim (3 nodes Ready) vs kind (created, nodes Ready, operator image loaded)",
        "anchor (kind)",
    ),
    (
        "pod-start",
        "pod start, create to Running: containers vs host processes",
        "anchor (processes)",
    ),
    (
        "pod-rss",
        "RSS per idle pod, its own processes: containers vs host processes",
        "anchor (processes)",
    ),
    (
        "pod-runtime-rss",
        "RSS per pod of the OCI runtime's run process (not in the row above)",
        "anchor (processes)",
    ),
    (
        "suite",
        "feature suite wall time: sim vs local (real control plane)",
        "anchor (local)",
    ),
    (
        "suite-kind",
        "feature suite wall time: sim vs kind (real cluster)",
        "anchor (kind)",
    ),
];

#[test]
fn bench_with_two_runs_prints_every_row_for_ours_and_its_anchor_and_writes_json_and_a_chart() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let json = dir.path().join("report.json");
    let suite = dir.path().join("suite.json");
    std::fs::write(&suite, r#"{"wallSeconds": 42.5}"#).unwrap();
    let local_suite = dir.path().join("local-suite.json");
    std::fs::write(&local_suite, r#"{"wallSeconds": 425.0}"#).unwrap();
    let kind_suite = dir.path().join("kind-suite.json");
    std::fs::write(&kind_suite, r#"{"wallSeconds": 377.0}"#).unwrap();
    let kind_cluster = dir.path().join("kind-cluster.json");
    std::fs::write(
        &kind_cluster,
        r#"{"cluster": "c", "createdSeconds": 30.0, "readySeconds": 55.5}"#,
    )
    .unwrap();
    let output = opconform()
        .args(["bench", "--runs", "2", "--objects", "3", "--window", "1s"])
        .arg("--out")
        .arg(&out)
        .arg("--json")
        .arg(&json)
        .arg("--suite")
        .arg(&suite)
        .arg("--local-suite")
        .arg(&local_suite)
        .arg("--kind-suite")
        .arg(&kind_suite)
        .arg("--kind-cluster")
        .arg(&kind_cluster)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "bench failed\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );

    // The table: each row's line names ours, the next line the anchor subject by name
    // and version (or says what stands beside ours).
    let lines: Vec<&str> = stdout.lines().collect();
    for (_, title, anchor) in ROWS {
        let at = lines
            .iter()
            .position(|l| l.starts_with(title))
            .unwrap_or_else(|| panic!("no row {title:?} in\n{stdout}"));
        assert!(lines[at].contains("ours ("), "{}", lines[at]);
        assert!(
            lines
                .get(at + 1)
                .is_some_and(|l| l.trim_start().starts_with(anchor)),
            "no line of {anchor:?} after {title:?} in\n{stdout}"
        );
    }
    assert!(
        !stdout.contains("(poll)"),
        "a --standby poll row is left:\n{stdout}"
    );
    for heading in ["min", "p50", "p90", "p95", "max", "ours/anchor"] {
        assert!(stdout.contains(heading), "{heading} missing in\n{stdout}");
    }
    assert!(stderr.contains("run 2/2"), "no progress lines:\n{stderr}");

    // The JSON: every row, every sample, the summary of each.
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(report["runs"], 2);
    assert!(report["machine"]["cpus"].as_u64().unwrap() >= 1);
    assert!(report["wallSeconds"].as_f64().unwrap() > 0.0);
    let rows = report["rows"].as_array().unwrap();
    let ids: Vec<&str> = rows.iter().map(|r| r["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ROWS.map(|(id, ..)| id));
    for row in rows {
        let id = row["id"].as_str().unwrap();
        let ours = &row["ours"];
        let samples = ours["samples"].as_array().unwrap();
        let expected = match id {
            // 30 pods once, whatever the runs; their memory is one figure per pod.
            "pod-start" => 30,
            id if id.starts_with("api-") || id.starts_with("suite") || id.starts_with("pod-") => 1,
            _ => 2,
        };
        // Pods are containers only where the harness is root and has a runtime; else the
        // table says why.
        if id.starts_with("pod-") && ours["notMeasured"].is_string() {
            assert_eq!(ours["behaviour"], "containers", "{id}");
            continue;
        }
        assert_eq!(samples.len(), expected, "{id}: {ours}");
        assert_eq!(ours["n"], expected, "{id}");
        for stat in ["min", "p50", "p90", "p95", "max"] {
            assert!(ours[stat].is_number(), "{id}: no {stat} in {ours}");
        }
        let anchor = &row["anchor"];
        match anchor["behaviour"].as_str().unwrap() {
            subject @ ("controller-runtime" | "operator-lib") => {
                let label = if id == "for-life" {
                    OPERATOR_LIB
                } else {
                    CONTROLLER_RUNTIME
                };
                assert!(label.starts_with(subject), "{id}: {subject}");
                assert_eq!(anchor["subject"], label, "{id}");
                assert_eq!(
                    anchor["samples"].as_array().unwrap().len(),
                    expected,
                    "{id}"
                );
                assert!(anchor["p50"].is_number(), "{id}: {anchor}");
                assert_eq!(ours["behaviour"], "watch", "{id}");
            }
            subject @ ("kube-leader-election" | "kube-lease-manager") => {
                let label = if subject == "kube-leader-election" {
                    KUBE_LEADER_ELECTION
                } else {
                    KUBE_LEASE_MANAGER
                };
                assert!(id.ends_with(subject), "{id}: {subject}");
                assert_eq!(anchor["subject"], label, "{id}");
                assert_eq!(
                    anchor["samples"].as_array().unwrap().len(),
                    expected,
                    "{id}"
                );
                assert_eq!(ours["behaviour"], "watch", "{id}");
            }
            "none" => assert!(anchor["notMeasured"].is_string(), "{id}: {anchor}"),
            "kind" => {
                let wanted = if id == "start-kind" { 55_500.0 } else { 377.0 };
                assert_eq!(anchor["samples"][0], wanted, "{id}");
            }
            // A real control plane where the Kubernetes binaries are built; why not, where not.
            "real" => assert!(
                anchor["samples"].as_array().unwrap().len() == expected
                    || anchor["notMeasured"].is_string(),
                "{id}: {anchor}"
            ),
            "local" => assert_eq!(anchor["samples"][0], 425.0, "{id}"),
            "processes" if id == "pod-runtime-rss" => {
                assert!(anchor["notMeasured"].is_string(), "{id}: {anchor}");
            }
            "processes" => {
                assert_eq!(
                    anchor["samples"].as_array().unwrap().len(),
                    expected,
                    "{id}"
                );
                assert_eq!(ours["behaviour"], "containers", "{id}");
            }
            other => panic!("{id}: anchor behaviour {other}"),
        }
        if row["group"] == "lease-release" || row["group"] == "lease-kill" || id == "for-life" {
            for side in [ours, anchor] {
                let details = side["details"].as_array().unwrap();
                assert_eq!(details.len(), 2, "{id}");
                for key in ["from", "to", "oldLeader", "newLeader"] {
                    assert!(
                        details[0][key].is_string(),
                        "{id}: no {key} in {}",
                        details[0]
                    );
                }
            }
            // The anchor's pods are the subject's, not ours.
            let new_leader = anchor["details"][0]["newLeader"].as_str().unwrap();
            assert!(
                new_leader.starts_with("go-election-subject-"),
                "{id}: {new_leader}"
            );
        }
    }
    let suite_row = rows.iter().find(|r| r["id"] == "suite").unwrap();
    assert_eq!(suite_row["ours"]["samples"][0], 42.5);
    assert!(
        (suite_row["ratio"].as_f64().unwrap() - 0.1).abs() < 1e-9,
        "{suite_row}"
    );

    // The files beside the table.
    for file in ["table.txt", "bench.json", "handoffs.svg"] {
        assert!(
            out.join(file).is_file(),
            "{file} missing in {}",
            out.display()
        );
    }
    let svg = std::fs::read_to_string(out.join("handoffs.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    assert!(svg.contains("lease handoff after graceful release"));
    assert!(svg.contains(CONTROLLER_RUNTIME) && svg.contains(OPERATOR_LIB));
}

#[test]
fn bench_refuses_an_unknown_row_and_zero_runs_as_usage_errors() {
    let out = opconform()
        .args(["bench", "--only", "everything"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("lease-release"));
    let out = opconform().args(["bench", "--runs", "0"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn bench_without_a_suite_file_says_how_to_measure_it() {
    let dir = tempfile::tempdir().unwrap();
    let output = opconform()
        .args(["bench", "--only", "suite", "--suite"])
        .arg(dir.path().join("none.json"))
        .arg("--out")
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(output.status.success());
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains("not measured: run `cargo test --test e2e` first"),
        "{stdout}"
    );
}

//! `opconform bench` end to end: every row measured once with both behaviours, a
//! well-formed table, JSON with every sample, and the SVG chart. Asserts nothing about the
//! numbers themselves: the bench reports, it does not judge.

use assert_cmd::Command;
use serde_json::Value;

fn opconform() -> Command {
    Command::new(assert_cmd::cargo::cargo_bin!("opconform"))
}

/// Every row of the table, in order, with its id in the JSON.
const ROWS: [(&str, &str); 12] = [
    ("lease-release", "lease handoff after graceful release"),
    ("lease-kill", "lease takeover after kill, from the kill"),
    (
        "lease-kill-expiry",
        "lease takeover after kill, from expiry",
    ),
    ("for-life", "for-life takeover after GC of the lock"),
    ("api-standby", "API requests per standby per minute"),
    ("api-leader", "API requests per leader per minute"),
    ("rss-standby", "RSS of a standby with 3 Memcached"),
    ("rss-leader", "RSS of the leader with 3 Memcached"),
    (
        "start-first-request",
        "sim cluster start to first served request",
    ),
    ("start-nodes-ready", "sim cluster start to 3 nodes Ready"),
    (
        "start-real",
        "cluster start: sim (3 nodes Ready) vs real control plane (every component ready)",
    ),
    (
        "suite",
        "feature suite wall time: sim vs local (real control plane)",
    ),
];

#[test]
fn bench_with_two_runs_prints_every_row_for_both_behaviours_and_writes_json_and_a_chart() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let json = dir.path().join("report.json");
    let suite = dir.path().join("suite.json");
    std::fs::write(&suite, r#"{"wallSeconds": 42.5}"#).unwrap();
    let local_suite = dir.path().join("local-suite.json");
    std::fs::write(&local_suite, r#"{"wallSeconds": 425.0}"#).unwrap();
    let output = opconform()
        .args(["bench", "--runs", "2", "--objects", "3", "--window", "3s"])
        .arg("--out")
        .arg(&out)
        .arg("--json")
        .arg(&json)
        .arg("--suite")
        .arg(&suite)
        .arg("--local-suite")
        .arg(&local_suite)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "bench failed\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );

    // The table: each row's line names ours, the next line the anchor.
    let lines: Vec<&str> = stdout.lines().collect();
    for (_, title) in ROWS {
        let at = lines
            .iter()
            .position(|l| l.starts_with(title))
            .unwrap_or_else(|| panic!("no row {title:?} in\n{stdout}"));
        assert!(lines[at].contains("ours ("), "{}", lines[at]);
        assert!(
            lines.get(at + 1).is_some_and(|l| l.contains("anchor (")),
            "no anchor line after {title:?} in\n{stdout}"
        );
    }
    for heading in ["min", "p50", "p90", "max", "ours/anchor"] {
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
    assert_eq!(ids, ROWS.map(|(id, _)| id));
    for row in rows {
        let id = row["id"].as_str().unwrap();
        let ours = &row["ours"];
        let samples = ours["samples"].as_array().unwrap();
        let expected = match id {
            "api-standby" | "api-leader" | "suite" => 1,
            _ => 2,
        };
        assert_eq!(samples.len(), expected, "{id}: {ours}");
        assert_eq!(ours["n"], expected, "{id}");
        for stat in ["min", "p50", "p90", "max"] {
            assert!(ours[stat].is_number(), "{id}: no {stat} in {ours}");
        }
        let anchor = &row["anchor"];
        match anchor["behaviour"].as_str().unwrap() {
            "poll" => {
                assert_eq!(
                    anchor["samples"].as_array().unwrap().len(),
                    expected,
                    "{id}"
                );
                assert!(anchor["p50"].is_number(), "{id}: {anchor}");
                assert_eq!(ours["behaviour"], "watch", "{id}");
            }
            "none" => assert!(anchor["notMeasured"].is_string(), "{id}: {anchor}"),
            // A real control plane where the Kubernetes binaries are built; why not, where not.
            "real" => assert!(
                anchor["samples"].as_array().unwrap().len() == expected
                    || anchor["notMeasured"].is_string(),
                "{id}: {anchor}"
            ),
            "local" => assert_eq!(anchor["samples"][0], 425.0, "{id}"),
            other => panic!("{id}: anchor behaviour {other}"),
        }
        if row["group"] == "lease-release" || row["group"] == "lease-kill" || id == "for-life" {
            let details = ours["details"].as_array().unwrap();
            assert_eq!(details.len(), 2, "{id}");
            for key in ["from", "to", "oldLeader", "newLeader"] {
                assert!(
                    details[0][key].is_string(),
                    "{id}: no {key} in {}",
                    details[0]
                );
            }
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

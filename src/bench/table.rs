//! The bench table as printed: a header naming the machine and the timings, two lines per
//! row (ours, then the anchor subject by name and version) with n / min / p50 / p90 / p95 /
//! max and ours over the anchor's, then what the anchors are known to do.

use std::fmt::Write as _;

use super::{Report, Series};

/// A number with three significant digits (at least no decimals): `3.42`, `720`, `2010`.
pub(crate) fn sig3(v: f64) -> String {
    if v == 0.0 || !v.is_finite() {
        return format!("{v}");
    }
    let decimals = |magnitude: f64| (2 - magnitude.log10().floor() as i32).clamp(0, 6) as usize;
    let first = decimals(v.abs());
    // Rounding may carry into a new digit (0.9996 → 1.000): count from the rounded value.
    let rounded: f64 = format!("{v:.first$}").parse().unwrap_or(v);
    let d = decimals(rounded.abs().max(f64::MIN_POSITIVE)).min(first);
    format!("{v:.d$}")
}

const HEADINGS: [&str; 11] = [
    "row",
    "unit",
    "behaviour",
    "n",
    "min",
    "p50",
    "p90",
    "p95",
    "max",
    "ours/anchor",
    "target",
];

fn cells(series: &Series) -> Vec<String> {
    match (&series.stats, &series.not_measured) {
        (Some(s), _) => vec![
            s.n.to_string(),
            sig3(s.min),
            sig3(s.p50),
            sig3(s.p90),
            sig3(s.p95),
            sig3(s.max),
        ],
        (None, why) => vec![
            "-".into(),
            why.clone().unwrap_or_else(|| "no samples".into()),
        ],
    }
}

/// Renders the report's table.
pub(crate) fn render(report: &Report) -> String {
    let mut lines: Vec<Vec<String>> = vec![HEADINGS.iter().map(|h| h.to_string()).collect()];
    for row in &report.rows {
        for (ours, series) in [(true, &row.ours), (false, &row.anchor)] {
            let mut line = if ours {
                vec![row.title.clone(), row.unit.to_string()]
            } else {
                vec![String::new(), String::new()]
            };
            line.push(series.label(ours));
            let measured = cells(series);
            let full = measured.len() == 6;
            line.extend(measured);
            if full {
                line.push(if ours {
                    row.ratio.map(sig3).unwrap_or_else(|| "-".into())
                } else {
                    String::new()
                });
                line.push(if ours {
                    row.target.to_string()
                } else {
                    String::new()
                });
            }
            lines.push(line);
        }
    }
    // Column widths from the fully measured lines, and from every line's title, unit and
    // behaviour; a "not measured" reason runs on.
    let mut widths = [0usize; HEADINGS.len()];
    for line in &lines {
        let full = line.len() == HEADINGS.len();
        let columns = if full { HEADINGS.len() } else { 3 };
        for (w, cell) in widths.iter_mut().zip(line).take(columns) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let _ = writeln!(
        out,
        "opconform bench: {} runs per row and side; {}",
        report.runs,
        report.machine.describe()
    );
    let _ = writeln!(
        out,
        "handoffs: lease {} (LeaseDuration/RenewDeadline/RetryPeriod), one leader and one standby, times from the API server's audit",
        report.handoff_lease
    );
    let _ = writeln!(
        out,
        "API and memory: lease {}, 2 replicas, {} Memcached objects reconciled by ours (the anchor and the peers serve none and run with {}), {} s window",
        report.steady_lease,
        report.objects,
        super::ANCHOR_QUIET_WORK,
        sig3(report.window_seconds)
    );
    let _ = writeln!(
        out,
        "ours = the bundled operator with --standby watch; anchors and peers = the subjects named, built from subjects/go-election and the workspace; ours/anchor compares p50"
    );
    if report
        .rows
        .iter()
        .any(|r| r.group == super::RowGroup::PodStart)
    {
        let _ = writeln!(
            out,
            "pod start: {} busybox pods (sh -c \"sleep 3600\") created at once on {} nodes, once per run whatever the runs; ours = the pods as containers of the OCI runtime found (crun, else runc), anchor = the same pods as host processes; create and Running from the API server's audit",
            super::pod_start::PODS,
            super::pod_start::NODES
        );
    }
    let _ = writeln!(out);
    for line in &lines {
        let mut text = String::new();
        for (i, cell) in line.iter().enumerate() {
            let numeric = (3..=9).contains(&i) && line.len() == HEADINGS.len();
            let width = widths[i.min(HEADINGS.len() - 1)];
            if i + 1 == line.len() {
                if numeric {
                    let _ = write!(text, "{cell:>width$}");
                } else {
                    text.push_str(cell);
                }
            } else if numeric {
                let _ = write!(text, "{cell:>width$}  ");
            } else {
                let _ = write!(text, "{cell:<width$}  ");
            }
        }
        let _ = writeln!(out, "{}", text.trim_end());
    }
    let _ = writeln!(out, "\nwhat the anchors do:");
    for row in &report.rows {
        let _ = writeln!(out, "  {}: {}", row.title, row.reference);
    }
    if report.rows.iter().any(|r| r.id == "for-life") {
        let _ = writeln!(
            out,
            "  (operator-lib's for-life standbys had campaigned only seconds, so their backoff was still short: a lower bound)"
        );
    }
    let _ = writeln!(out, "\nmeasured in {:.0} s", report.wall_seconds);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::{Machine, Row, RowGroup};

    fn report() -> Report {
        Report {
            machine: Machine {
                cpus: 2,
                cpu_model: "Test CPU".into(),
                kernel: "6.1".into(),
                profile: "release",
            },
            started_at: chrono::Utc::now(),
            wall_seconds: 12.0,
            runs: 2,
            objects: 100,
            window_seconds: 60.0,
            handoff_lease: "2s/1.5s/0.5s".into(),
            steady_lease: "15s/10s/2s".into(),
            rows: vec![
                Row {
                    id: "lease-release",
                    group: RowGroup::LeaseRelease,
                    title: "lease handoff after graceful release".into(),
                    unit: "ms",
                    target: "p50 <= 50 ms",
                    reference: "client-go: next poll",
                    ours: Series::measured("watch", vec![3.0, 5.0], vec![]),
                    anchor: Series {
                        subject: Some("controller-runtime v0.22.5".into()),
                        ..Series::measured("controller-runtime", vec![600.0, 900.0], vec![])
                    },
                    ratio: Some(0.005),
                },
                Row {
                    id: "suite",
                    group: RowGroup::Suite,
                    title: "feature suite wall time".into(),
                    unit: "s",
                    target: "<= 180 s",
                    reference: "kind suites: many minutes",
                    ours: Series::not_measured(
                        "suite",
                        "not measured: run `cargo test --test e2e` first",
                    ),
                    anchor: Series::not_measured("none", "the same suite for both behaviours"),
                    ratio: None,
                },
            ],
        }
    }

    #[test]
    fn numbers_keep_three_significant_digits() {
        assert_eq!(sig3(3.4178), "3.42");
        assert_eq!(sig3(720.4), "720");
        assert_eq!(sig3(2010.0), "2010");
        assert_eq!(sig3(0.004123), "0.00412");
        assert_eq!(sig3(0.0), "0");
        assert_eq!(sig3(-12.34), "-12.3");
        assert_eq!(sig3(0.99996), "1.00");
        assert_eq!(sig3(99.96), "100");
    }

    #[test]
    fn each_row_has_a_line_for_ours_and_one_for_the_anchor_by_name() {
        let table = render(&report());
        let line = |start: &str| {
            table
                .lines()
                .find(|l| l.contains(start))
                .unwrap_or_else(|| panic!("no line with {start:?} in\n{table}"))
                .to_string()
        };
        let ours = line("lease handoff after graceful release");
        assert!(ours.contains("ours (watch)"), "{ours}");
        assert!(ours.contains("0.00500"), "{ours}");
        assert!(ours.ends_with("p50 <= 50 ms"), "{ours}");
        let anchor = line("controller-runtime v0.22.5");
        assert!(anchor.contains("600") && anchor.contains("900"), "{anchor}");
        assert!(anchor.starts_with(' '), "{anchor}");
        assert!(line("feature suite wall time").contains("not measured: run `cargo test"));
        assert!(line("anchor (n/a)").contains("the same suite"));
        assert!(table.contains("2 cores, Test CPU, Linux 6.1, release build"));
    }

    #[test]
    fn stats_line_up_under_their_headings() {
        let table = render(&report());
        let heading = table.lines().find(|l| l.starts_with("row")).unwrap();
        let ours = table.lines().find(|l| l.contains("ours (watch)")).unwrap();
        let end = |l: &str, word: &str| l.rfind(word).unwrap() + word.len();
        assert_eq!(end(heading, "max"), end(ours, "5.00"));
    }

    #[test]
    fn a_line_not_measured_keeps_its_label_under_behaviour() {
        let mut report = report();
        report.rows[1].title = "a title longer than any other row's title here".into();
        let table = render(&report);
        let heading = table.lines().find(|l| l.starts_with("row")).unwrap();
        let column = heading.find("behaviour").unwrap();
        for label in ["ours (suite)", "anchor (n/a)", "ours (watch)"] {
            let line = table.lines().find(|l| l.contains(label)).unwrap();
            assert_eq!(line.find(label), Some(column), "{line}");
        }
    }
}

//! Reports: a timeline per scenario (self-contained HTML with inline SVG: one lane per
//! replica, leadership bars, fault spans, writes as ticks, failover annotated) and an index
//! page listing scenarios with their verdicts and failover figures.

use std::fmt::Write as _;
use std::path::Path;

use chrono::{DateTime, Utc};

use crate::check::{Failover, Verdict, gauge_intervals};
use crate::record::{History, Observation, describe};

/// Errors of report writing.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// A file could not be written.
    #[error("cannot write report {path}")]
    Write {
        /// The file.
        path: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

const LANE: f64 = 34.0;
const LEFT: f64 = 280.0;
const WIDTH: f64 = 1100.0;
const TOP: f64 = 40.0;

struct Scale {
    origin: DateTime<Utc>,
    span: f64,
}

impl Scale {
    fn x(&self, t: DateTime<Utc>) -> f64 {
        let secs = (t - self.origin).num_microseconds().unwrap_or(0) as f64 / 1e6;
        LEFT + (secs / self.span).clamp(0.0, 1.0) * (WIDTH - LEFT - 20.0)
    }

    fn secs(&self, t: DateTime<Utc>) -> f64 {
        (t - self.origin).num_microseconds().unwrap_or(0) as f64 / 1e6
    }
}

/// A fault span: from the fault to its undo (or the end of the history).
struct Span {
    label: String,
    from: DateTime<Utc>,
    to: Option<DateTime<Utc>>,
}

fn undo_of(verb: &str) -> Option<&'static str> {
    match verb {
        "hold" => Some("release"),
        "partition" => Some("repair"),
        "reject" => Some("allow"),
        "delay" => Some("undelay"),
        _ => None,
    }
}

fn fault_spans(history: &History) -> Vec<Span> {
    let mut spans: Vec<Span> = Vec::new();
    for e in history.entries() {
        let Observation::Fault {
            verb,
            target,
            detail,
        } = &e.observation
        else {
            continue;
        };
        let closes = spans.iter_mut().rev().find(|s| {
            s.to.is_none()
                && s.label.ends_with(target.as_str())
                && s.label
                    .split_whitespace()
                    .next()
                    .and_then(undo_of)
                    .is_some_and(|u| u == verb)
        });
        match closes {
            Some(span) => span.to = Some(e.time),
            None => spans.push(Span {
                label: format!("{verb} {detail} {target}").replace("  ", " "),
                from: e.time,
                to: if undo_of(verb).is_some() {
                    None
                } else {
                    Some(e.time)
                },
            }),
        }
    }
    spans
}

fn short(name: &str, max: usize) -> String {
    if name.chars().count() <= max {
        name.to_string()
    } else {
        let tail: String = name
            .chars()
            .rev()
            .take(max - 1)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        format!("…{tail}")
    }
}

/// Renders the timeline of one scenario.
pub fn timeline_html(
    scenario: &str,
    history: &History,
    verdicts: &[Verdict],
    failovers: &[Failover],
) -> String {
    let entries = history.entries();
    let origin = entries.first().map(|e| e.time).unwrap_or_else(Utc::now);
    let end = entries.last().map(|e| e.time).unwrap_or(origin);
    let span = ((end - origin).num_milliseconds() as f64 / 1000.0).max(1.0);
    let scale = Scale { origin, span };
    let replicas = history.replicas();
    let faults = fault_spans(history);
    let fault_lane = replicas.len() as f64;
    let height =
        TOP + (replicas.len() as f64 + 1.0 + faults.len().min(8) as f64 * 0.5) * LANE + 40.0;
    let mut svg = String::new();
    let _ = write!(
        svg,
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" font-family="system-ui, sans-serif" font-size="12">"##
    );
    // Time axis with a tick per second step.
    let step = [0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0]
        .into_iter()
        .find(|s| span / s <= 20.0)
        .unwrap_or(120.0);
    let mut t = 0.0;
    while t <= span + 1e-9 {
        let x = LEFT + (t / span) * (WIDTH - LEFT - 20.0);
        let _ = write!(
            svg,
            r##"<line x1="{x:.1}" y1="{}" x2="{x:.1}" y2="{}" stroke="#e5e7eb"/><text x="{x:.1}" y="{}" text-anchor="middle" fill="#6b7280">{t}s</text>"##,
            TOP - 8.0,
            height - 30.0,
            height - 14.0
        );
        t += step;
    }
    for (i, replica) in replicas.iter().enumerate() {
        let y = TOP + i as f64 * LANE;
        let _ = write!(
            svg,
            r##"<text x="8" y="{:.1}" fill="#111827">{}<title>{}</title></text><line x1="{LEFT}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="#d1d5db"/>"##,
            y + LANE / 2.0 + 4.0,
            escape(&short(replica, 40)),
            escape(replica),
            y + LANE / 2.0,
            WIDTH - 20.0,
            y + LANE / 2.0
        );
    }
    let lane_of = |r: &str| replicas.iter().position(|x| x == r);
    for interval in gauge_intervals(history) {
        if let Some(i) = lane_of(&interval.replica) {
            let y = TOP + i as f64 * LANE + 8.0;
            let x1 = scale.x(interval.from);
            let x2 = scale.x(interval.to).max(x1 + 2.0);
            let _ = write!(
                svg,
                r##"<rect x="{x1:.1}" y="{y:.1}" width="{:.1}" height="{:.1}" rx="3" fill="#2563eb" opacity="0.8"><title>{} leader {:.3}s–{:.3}s</title></rect>"##,
                x2 - x1,
                LANE - 16.0,
                escape(&interval.replica),
                scale.secs(interval.from),
                scale.secs(interval.to)
            );
        }
    }
    for e in entries {
        if let Observation::Write {
            replica,
            election,
            resource,
            verb,
            code,
            ..
        } = &e.observation
            && let Some(i) = lane_of(replica)
        {
            let y = TOP + i as f64 * LANE;
            let x = scale.x(e.time);
            let color = match (*election, *code >= 400) {
                (_, true) => "#dc2626",
                (true, false) => "#9ca3af",
                (false, false) => "#059669",
            };
            let _ = write!(
                svg,
                r##"<line x1="{x:.1}" y1="{:.1}" x2="{x:.1}" y2="{:.1}" stroke="{color}" stroke-width="2"><title>{:.3}s {} {} {} → {}</title></line>"##,
                y + 3.0,
                y + LANE - 3.0,
                scale.secs(e.time),
                escape(replica),
                verb,
                escape(resource),
                code
            );
        }
    }
    let y0 = TOP + fault_lane * LANE;
    let _ = write!(
        svg,
        r##"<text x="8" y="{:.1}" fill="#b45309">faults</text>"##,
        y0 + LANE / 2.0 + 4.0
    );
    for (k, f) in faults.iter().enumerate() {
        let y = y0 + 6.0 + (k % 8) as f64 * (LANE * 0.5);
        let x1 = scale.x(f.from);
        let x2 = scale.x(f.to.unwrap_or(end)).max(x1 + 3.0);
        // The label goes right of the span when it fits, else inside it from the left.
        let label_width = f.label.len() as f64 * 6.2;
        let (label_x, anchor) = if x2 + 4.0 + label_width < WIDTH {
            (x2 + 4.0, "start")
        } else {
            (x1 + 4.0, "start")
        };
        let _ = write!(
            svg,
            r##"<rect x="{x1:.1}" y="{y:.1}" width="{:.1}" height="12" fill="#f59e0b" opacity="0.6"><title>{}</title></rect><text x="{label_x:.1}" y="{:.1}" fill="#78350f" font-size="11" text-anchor="{anchor}">{}</text>"##,
            x2 - x1,
            escape(&f.label),
            y + 10.0,
            escape(&f.label)
        );
    }
    for v in verdicts.iter().filter(|v| !v.passed) {
        if let (Some(first), Some(last)) = (v.evidence.first(), v.evidence.last()) {
            let x1 = scale.x(first.time);
            let x2 = scale.x(last.time).max(x1 + 4.0);
            let _ = write!(
                svg,
                r##"<rect x="{x1:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="#dc2626" opacity="0.12"><title>{}: {}</title></rect><text x="{x2:.1}" y="{:.1}" fill="#dc2626" text-anchor="end" font-weight="bold">✘ {}</text>"##,
                TOP - 4.0,
                x2 - x1,
                replicas.len() as f64 * LANE + 4.0,
                escape(v.checker),
                escape(&v.summary),
                TOP + replicas.len() as f64 * LANE - 4.0,
                escape(v.checker)
            );
        }
    }
    for f in failovers {
        let x1 = scale.x(f.fault.time);
        if let Some(d) = f.to_lock {
            let x2 = scale.x(f.fault.time + chrono::Duration::from_std(d).unwrap_or_default());
            let y = TOP - 22.0;
            let _ = write!(
                svg,
                r##"<line x1="{x1:.1}" y1="{y:.1}" x2="{x2:.1}" y2="{y:.1}" stroke="#7c3aed" stroke-width="2"/><text x="{x1:.1}" y="{:.1}" fill="#7c3aed">failover {} → {}: {} ms</text>"##,
                y - 4.0,
                escape(f.old_leader.as_deref().unwrap_or("?")),
                escape(f.new_leader.as_deref().unwrap_or("?")),
                d.as_millis()
            );
        }
    }
    svg.push_str("</svg>");
    let verdict_rows: String = verdicts
        .iter()
        .map(|v| {
            format!(
                r#"<tr class="{}"><td>{}</td><td>{}</td><td>{}</td></tr>"#,
                if v.passed { "pass" } else { "fail" },
                if v.passed { "✔" } else { "✘" },
                escape(v.checker),
                escape(&v.summary)
            )
        })
        .collect();
    format!(
        r#"<!doctype html><html><head><meta charset="utf-8"><title>{title}</title><style>
body {{ font-family: system-ui, sans-serif; margin: 24px; color: #111827; }}
h1 {{ font-size: 20px; }} table {{ border-collapse: collapse; margin: 12px 0; }}
td {{ padding: 4px 10px; border-bottom: 1px solid #e5e7eb; }} td:nth-child(2) {{ white-space: nowrap; }}
tr.pass td:first-child {{ color: #059669; }} tr.fail td:first-child {{ color: #dc2626; }}
.legend span {{ margin-right: 16px; }} pre {{ background: #f9fafb; padding: 12px; font-size: 12px; overflow-x: auto; }}
</style></head><body><h1>{title}</h1>
<div class="legend"><span style="color:#2563eb">■ leader</span><span style="color:#059669">| write</span><span style="color:#9ca3af">| election write</span><span style="color:#dc2626">| failed write</span><span style="color:#f59e0b">■ fault in force</span></div>
{svg}
<table>{verdict_rows}</table>
<details><summary>history ({n} entries)</summary><pre>{log}</pre></details>
</body></html>"#,
        title = escape(scenario),
        n = entries.len(),
        log = escape(&describe(entries, origin)),
    )
}

/// One line of the index page.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ScenarioSummary {
    /// Scenario name.
    pub name: String,
    /// Relative link to its timeline.
    pub link: String,
    /// Whether every check passed.
    pub passed: bool,
    /// Failover figures, e.g. `crash: 1234 ms`.
    pub failovers: Vec<String>,
}

/// Renders the index page.
pub fn index_html(scenarios: &[ScenarioSummary]) -> String {
    let rows: String = scenarios
        .iter()
        .map(|s| {
            format!(
                r#"<tr><td style="color:{}">{}</td><td><a href="{}">{}</a></td><td>{}</td></tr>"#,
                if s.passed { "#059669" } else { "#dc2626" },
                if s.passed { "✔" } else { "✘" },
                escape(&s.link),
                escape(&s.name),
                escape(&s.failovers.join(", "))
            )
        })
        .collect();
    format!(
        r#"<!doctype html><html><head><meta charset="utf-8"><title>opconform scenarios</title><style>body {{ font-family: system-ui, sans-serif; margin: 24px; }} td {{ padding: 4px 10px; border-bottom: 1px solid #e5e7eb; }}</style></head><body><h1>opconform scenarios</h1><table>{rows}</table></body></html>"#
    )
}

/// Writes a file, creating its directory.
///
/// # Errors
/// When the directory or file cannot be written.
pub fn write(path: &Path, content: &str) -> Result<(), ReportError> {
    let fail = |source| ReportError::Write {
        path: path.display().to_string(),
        source,
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(fail)?;
    }
    std::fs::write(path, content).map_err(fail)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::{failover, single_leader};

    fn sample() -> History {
        let t0 = DateTime::from_timestamp_millis(1_800_000_000_000).unwrap();
        let at = |ms: i64| t0 + chrono::Duration::milliseconds(ms);
        let mut h = History::new();
        h.push(
            at(0),
            Observation::Lock {
                lock: "lock".into(),
                holder: Some("op-a".into()),
                transitions: Some(0),
                resource_version: String::new(),
            },
        );
        for ms in (0..3000).step_by(250) {
            h.push(
                at(ms),
                Observation::Gauge {
                    replica: "op-a".into(),
                    leader: ms < 1500,
                },
            );
            h.push(
                at(ms),
                Observation::Gauge {
                    replica: "op-b".into(),
                    leader: ms >= 2000,
                },
            );
        }
        h.push(
            at(1400),
            Observation::Fault {
                verb: "hold".into(),
                target: "pod ns/op-a".into(),
                detail: String::new(),
            },
        );
        h.push(
            at(2600),
            Observation::Fault {
                verb: "release".into(),
                target: "pod ns/op-a".into(),
                detail: String::new(),
            },
        );
        h.push(
            at(1900),
            Observation::Lock {
                lock: "lock".into(),
                holder: Some("op-b".into()),
                transitions: Some(1),
                resource_version: String::new(),
            },
        );
        h.push(
            at(2100),
            Observation::Write {
                replica: "op-b".into(),
                verb: "patch".into(),
                resource: "memcacheds/status".into(),
                namespace: "ns".into(),
                name: "m<1>".into(),
                code: 200,
                election: false,
            },
        );
        h
    }

    #[test]
    fn the_timeline_has_a_lane_per_replica_a_fault_span_and_the_failover() {
        let h = sample();
        let f = failover(&h, "hold").unwrap();
        let html = timeline_html("hold <leader>", &h, &[single_leader(&h)], &[f]);
        assert!(
            html.contains(">op-a<title>op-a</title></text>")
                && html.contains(">op-b<title>op-b</title></text>")
        );
        assert!(html.contains("hold pod ns/op-a"));
        assert!(html.contains("failover op-a → op-b: 500 ms"));
        assert!(html.contains("hold &lt;leader&gt;"), "names are escaped");
        assert_eq!(html.matches("<svg").count(), 1);
    }

    #[test]
    fn the_index_links_every_scenario_with_its_verdict() {
        let html = index_html(&[ScenarioSummary {
            name: "a".into(),
            link: "a/timeline.html".into(),
            passed: false,
            failovers: vec!["crash: 12 ms".into()],
        }]);
        assert!(
            html.contains(r#"href="a/timeline.html""#)
                && html.contains("crash: 12 ms")
                && html.contains("✘")
        );
    }
}

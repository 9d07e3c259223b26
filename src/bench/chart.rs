//! The SVG bar chart of the handoff distributions: per handoff row one bar for ours and one
//! for the anchor, each to its p50, with a min–max whisker, a p90 tick and every sample as
//! a dot, on a log time scale. Self-contained: no scripts, fonts or style sheets.

use std::fmt::Write as _;

use super::table::sig3;
use super::{Report, Row, RowGroup, Series};

const WIDTH: f64 = 980.0;
const LEFT: f64 = 360.0;
const RIGHT: f64 = 880.0;
const TOP: f64 = 70.0;
const BAR: f64 = 16.0;
const GROUP: f64 = 2.0 * 26.0 + 18.0;
const OURS: &str = "#1b9e77";
const ANCHOR: &str = "#d95f02";

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Milliseconds as an axis label: `0.1 ms`, `10 ms`, `1 s`.
fn time_label(ms: f64) -> String {
    if ms >= 1000.0 {
        format!("{} s", sig3(ms / 1000.0))
    } else {
        format!("{} ms", sig3(ms))
    }
}

/// A power of ten of milliseconds as a tick label: `0.1 ms`, `10 ms`, `1 s`, `100 s`.
fn tick_label(exponent: i32) -> String {
    if exponent >= 3 {
        format!("{} s", 10f64.powi(exponent - 3))
    } else {
        format!("{} ms", 10f64.powi(exponent))
    }
}

struct Scale {
    lo: f64,
    hi: f64,
}

impl Scale {
    fn x(&self, ms: f64) -> f64 {
        let v = ms.max(self.lo).log10();
        let (lo, hi) = (self.lo.log10(), self.hi.log10());
        LEFT + (v - lo) / (hi - lo) * (RIGHT - LEFT)
    }
}

fn handoff_rows(report: &Report) -> Vec<&Row> {
    report
        .rows
        .iter()
        .filter(|r| r.unit == "ms" && (r.ours.stats.is_some() || r.anchor.stats.is_some()))
        .filter(|r| {
            matches!(
                r.group,
                RowGroup::LeaseRelease | RowGroup::LeaseKill | RowGroup::ForLife
            )
        })
        .collect()
}

fn bar(svg: &mut String, scale: &Scale, y: f64, series: &Series, label: &str, colour: &str) {
    let _ = writeln!(
        svg,
        r##"<text x="{:.1}" y="{:.1}" font-size="11" text-anchor="end" fill="#444">{label}</text>"##,
        LEFT - 8.0,
        y + BAR * 0.75
    );
    let Some(stats) = &series.stats else {
        let _ = writeln!(
            svg,
            r##"<text x="{LEFT:.1}" y="{:.1}" font-size="11" fill="#888">not measured</text>"##,
            y + BAR * 0.75
        );
        return;
    };
    let mid = y + BAR / 2.0;
    let (x50, x90) = (scale.x(stats.p50), scale.x(stats.p90));
    let (xmin, xmax) = (scale.x(stats.min), scale.x(stats.max));
    let _ = writeln!(
        svg,
        r#"<rect x="{LEFT:.1}" y="{y:.1}" width="{:.1}" height="{BAR}" fill="{colour}" fill-opacity="0.35"/>"#,
        (x50 - LEFT).max(1.0)
    );
    let _ = writeln!(
        svg,
        r#"<line x1="{xmin:.1}" y1="{mid:.1}" x2="{xmax:.1}" y2="{mid:.1}" stroke="{colour}" stroke-width="1.5"/>"#
    );
    for x in [xmin, xmax] {
        let _ = writeln!(
            svg,
            r#"<line x1="{x:.1}" y1="{:.1}" x2="{x:.1}" y2="{:.1}" stroke="{colour}" stroke-width="1.5"/>"#,
            mid - 4.0,
            mid + 4.0
        );
    }
    let _ = writeln!(
        svg,
        r#"<line x1="{x50:.1}" y1="{y:.1}" x2="{x50:.1}" y2="{:.1}" stroke="{colour}" stroke-width="3"/>"#,
        y + BAR
    );
    let _ = writeln!(
        svg,
        r#"<line x1="{x90:.1}" y1="{:.1}" x2="{x90:.1}" y2="{:.1}" stroke="{colour}" stroke-width="1.5" stroke-dasharray="2,2"/>"#,
        y - 2.0,
        y + BAR + 2.0
    );
    for (i, v) in series.samples.iter().enumerate() {
        let jitter = ((i * 7) % 5) as f64 - 2.0;
        let _ = writeln!(
            svg,
            r#"<circle cx="{:.1}" cy="{:.1}" r="2" fill="{colour}" fill-opacity="0.8"/>"#,
            scale.x(*v),
            mid + jitter * 1.5
        );
    }
    let _ = writeln!(
        svg,
        r##"<text x="{:.1}" y="{:.1}" font-size="11" fill="#222">p50 {} · p90 {}</text>"##,
        xmax.max(x50) + 8.0,
        y + BAR * 0.75,
        time_label(stats.p50),
        time_label(stats.p90)
    );
}

/// Renders the chart (a short note instead of bars when the report has no handoff row).
pub(crate) fn render(report: &Report) -> String {
    let rows = handoff_rows(report);
    let samples: Vec<f64> = rows
        .iter()
        .flat_map(|r| r.ours.samples.iter().chain(&r.anchor.samples))
        .copied()
        .filter(|v| *v > 0.0)
        .collect();
    let lowest = samples.iter().copied().fold(f64::INFINITY, f64::min);
    let highest = samples.iter().copied().fold(0.0, f64::max);
    let lo_exp = if lowest.is_finite() {
        (lowest.log10().floor() as i32).max(-1)
    } else {
        0
    };
    let hi_exp = if highest > 0.0 {
        (highest.log10().ceil() as i32).max(lo_exp + 1)
    } else {
        lo_exp + 4
    };
    let (lo, hi) = (10f64.powi(lo_exp), 10f64.powi(hi_exp));
    let scale = Scale { lo, hi };
    let height = TOP + GROUP * rows.len().max(1) as f64 + 60.0;
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height:.0}" viewBox="0 0 {WIDTH} {height:.0}" font-family="sans-serif">"#
    );
    let _ = writeln!(
        svg,
        r#"<rect width="{WIDTH}" height="{height:.0}" fill="white"/>"#
    );
    let _ = writeln!(
        svg,
        r#"<text x="16" y="24" font-size="15" font-weight="bold">Handoff times: ours (--standby watch) beside the anchor subjects</text>"#
    );
    let _ = writeln!(
        svg,
        r##"<text x="16" y="44" font-size="11" fill="#444">{} runs each; lease {}; bar to p50, whisker min–max, dashed tick p90, dots = samples; log scale; {}</text>"##,
        report.runs,
        escape(&report.handoff_lease),
        escape(&report.machine.describe())
    );
    if rows.is_empty() {
        let _ = writeln!(
            svg,
            r#"<text x="16" y="{:.0}" font-size="13">no handoff row was measured in this run</text>"#,
            TOP + 20.0
        );
        svg.push_str("</svg>\n");
        return svg;
    }
    let bottom = TOP + GROUP * rows.len() as f64;
    for exponent in lo_exp..=hi_exp {
        let x = scale.x(10f64.powi(exponent));
        let _ = writeln!(
            svg,
            r##"<line x1="{x:.1}" y1="{:.1}" x2="{x:.1}" y2="{bottom:.1}" stroke="#ddd"/>"##,
            TOP - 8.0
        );
        let _ = writeln!(
            svg,
            r##"<text x="{x:.1}" y="{:.1}" font-size="11" text-anchor="middle" fill="#444">{}</text>"##,
            bottom + 16.0,
            tick_label(exponent)
        );
    }
    for (i, row) in rows.iter().enumerate() {
        let y = TOP + GROUP * i as f64;
        let _ = writeln!(
            svg,
            r#"<text x="16" y="{:.1}" font-size="12" font-weight="bold">{}</text>"#,
            y + 26.0,
            escape(&row.title)
        );
        bar(&mut svg, &scale, y, &row.ours, &row.ours.label(true), OURS);
        bar(
            &mut svg,
            &scale,
            y + 26.0,
            &row.anchor,
            &escape(&row.anchor.label(false)),
            ANCHOR,
        );
    }
    let _ = writeln!(
        svg,
        r##"<text x="16" y="{:.1}" font-size="11" fill="#444">times between two requests in the API server's audit; values at or below {} are drawn at the axis</text>"##,
        bottom + 40.0,
        tick_label(lo_exp)
    );
    svg.push_str("</svg>\n");
    svg
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::Machine;

    fn row(id: &'static str, ours: Vec<f64>, anchor: Vec<f64>) -> Row {
        Row {
            id,
            group: RowGroup::LeaseRelease,
            title: format!("{id} <title>"),
            unit: "ms",
            target: "",
            reference: "",
            ours: Series::measured("watch", ours, vec![]),
            anchor: Series::measured("controller-runtime", anchor, vec![]),
            ratio: None,
        }
    }

    fn report(rows: Vec<Row>) -> Report {
        Report {
            machine: Machine {
                cpus: 2,
                cpu_model: "cpu".into(),
                kernel: "6".into(),
                profile: "debug",
            },
            started_at: chrono::Utc::now(),
            wall_seconds: 1.0,
            runs: 2,
            objects: 1,
            window_seconds: 1.0,
            handoff_lease: "2s/1.5s/0.5s".into(),
            steady_lease: "15s/10s/2s".into(),
            rows,
        }
    }

    #[test]
    fn the_chart_has_two_bars_per_handoff_row_and_escapes_titles() {
        let svg = render(&report(vec![
            row("a", vec![2.0, 4.0], vec![600.0, 1000.0]),
            row("b", vec![-3.0, 5.0], vec![700.0, 2100.0]),
        ]));
        assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
        assert!(svg.trim_end().ends_with("</svg>"));
        assert_eq!(svg.matches("<rect x=").count(), 4);
        assert_eq!(svg.matches("<circle").count(), 8);
        assert!(svg.contains("a &lt;title&gt;"));
        assert!(svg.contains(">1 ms<") && svg.contains(">10 s<"), "{svg}");
    }

    #[test]
    fn ticks_are_powers_of_ten_in_ms_then_s() {
        let labels: Vec<String> = (-1..=5).map(tick_label).collect();
        assert_eq!(
            labels,
            ["0.1 ms", "1 ms", "10 ms", "100 ms", "1 s", "10 s", "100 s"]
        );
    }

    #[test]
    fn a_report_without_handoffs_says_so() {
        let svg = render(&report(vec![]));
        assert!(svg.contains("no handoff row was measured"));
    }

    #[test]
    fn the_scale_is_logarithmic() {
        let scale = Scale { lo: 1.0, hi: 100.0 };
        assert_eq!(scale.x(1.0), LEFT);
        assert_eq!(scale.x(100.0), RIGHT);
        assert!((scale.x(10.0) - (LEFT + RIGHT) / 2.0).abs() < 1e-9);
        assert_eq!(scale.x(-5.0), LEFT);
    }
}

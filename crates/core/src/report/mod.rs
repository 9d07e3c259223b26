//! Reports: a timeline per scenario (self-contained HTML with inline SVG: one lane per
//! replica, leadership bars, fault spans, writes as ticks, failover annotated; a lane per
//! Memcached with its changes and its Deployment's, or one summary lane when there are
//! many; Events as markers, a row per kind of object they are about) and an index page
//! listing scenarios with their verdicts and failover figures.

use std::fmt::Write as _;
use std::path::Path;

use chrono::{DateTime, Utc};

use crate::check::{Failover, Verdict, gauge_intervals};
use crate::record::{Change, Entry, History, Observation, describe};

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

/// Where the reports of a run in `repository` go: `$CARGO_TARGET_DIR/opconform` when the
/// variable is set (a relative one is taken from `repository`, as cargo does from where it
/// runs), else `repository/target/opconform`.
pub fn reports_root_in(repository: &Path) -> std::path::PathBuf {
    reports_root_from(std::env::var_os("CARGO_TARGET_DIR"), repository)
}

fn reports_root_from(
    target_dir: Option<std::ffi::OsString>,
    repository: &Path,
) -> std::path::PathBuf {
    target_dir
        .filter(|dir| !dir.is_empty())
        .map_or_else(|| repository.join("target"), |dir| repository.join(dir))
        .join("opconform")
}

/// `s` safe in HTML text and attribute values.
pub fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

const LANE: f64 = 34.0;
const LEFT: f64 = 280.0;
const WIDTH: f64 = 1100.0;
const TOP: f64 = 40.0;
/// Up to this many Memcached objects get a lane each; more share one summary lane.
const OBJECT_LANES: usize = 8;
/// Up to this many kinds of objects Events are about get a row each; the rest share the
/// last row.
const EVENT_ROWS: usize = 8;
/// The height of a row of Events (a line of reasons above the markers).
const EVENT_ROW: f64 = 26.0;
/// The height of the summary lane of many Memcached objects.
const SUMMARY_LANE: f64 = LANE * 1.5;

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
        "defer" => Some("serve"),
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

/// The changes drawn in one lane of the objects section: a Memcached and the Deployment it
/// owns (or a Deployment owned by no Memcached).
struct ObjectLane<'a> {
    namespace: String,
    name: String,
    memcached: bool,
    entries: Vec<&'a Entry>,
}

/// The Memcached and Deployment entries by object: a Deployment joins the lane of the
/// Memcached that owns it, else the lane of its own name. Lanes in order of first change.
fn object_lanes(history: &History) -> Vec<ObjectLane<'_>> {
    let mut lanes: Vec<ObjectLane<'_>> = Vec::new();
    for e in history.entries() {
        let (namespace, name, memcached) = match &e.observation {
            Observation::Memcached {
                namespace, name, ..
            } => (namespace, name.as_str(), true),
            Observation::Deployment {
                namespace,
                name,
                owner,
                ..
            } => (
                namespace,
                owner
                    .as_deref()
                    .and_then(|o| o.strip_prefix("Memcached/"))
                    .unwrap_or(name),
                false,
            ),
            _ => continue,
        };
        match lanes
            .iter_mut()
            .find(|l| l.namespace == *namespace && l.name == name)
        {
            Some(lane) => {
                lane.memcached |= memcached;
                lane.entries.push(e);
            }
            None => lanes.push(ObjectLane {
                namespace: namespace.clone(),
                name: name.to_string(),
                memcached,
                entries: vec![e],
            }),
        }
    }
    lanes
}

/// The Events by the kind of object they are about (`Memcached`, `Lease`, `Pod`, …), in
/// order of first occurrence, so that the operator's Events and the cluster's stay apart;
/// kinds beyond the first [`EVENT_ROWS`] − 1 share a last row `other` when there are more
/// than [`EVENT_ROWS`].
fn event_rows(history: &History) -> Vec<(String, Vec<&Entry>)> {
    let mut rows: Vec<(String, Vec<&Entry>)> = Vec::new();
    for e in history.entries() {
        let Observation::Event { involved, .. } = &e.observation else {
            continue;
        };
        let kind = involved.split('/').next().unwrap_or_default();
        match rows.iter_mut().find(|(k, _)| k == kind) {
            Some((_, entries)) => entries.push(e),
            None => rows.push((kind.to_string(), vec![e])),
        }
    }
    if rows.len() > EVENT_ROWS {
        let mut rest: Vec<&Entry> = rows
            .drain(EVENT_ROWS - 1..)
            .flat_map(|(_, entries)| entries)
            .collect();
        rest.sort_by_key(|e| e.time);
        rows.push(("other".into(), rest));
    }
    rows
}

/// The tooltip of a Memcached, Deployment or Event entry: its time and its line of the
/// history.
fn tooltip(e: &Entry, scale: &Scale) -> String {
    escape(&format!("{:.3}s {}", scale.secs(e.time), e.observation))
}

/// Draws one lane of a Memcached (and its Deployment) at `y`: the span it existed (red
/// while terminating), its changes as violet ticks above the middle labelled with what
/// changed most (see [`memcached_label`]), its Deployment's as cyan ticks below labelled
/// with ready/replicas where they changed. Labels that would run into the previous one of
/// their row are left out (the tooltip of every tick says all).
fn draw_object_lane(
    svg: &mut String,
    lane: &ObjectLane<'_>,
    y: f64,
    scale: &Scale,
    end: DateTime<Utc>,
) {
    let mid = y + LANE / 2.0;
    let label = format!(
        "{} {}/{}",
        if lane.memcached {
            "memcached"
        } else {
            "deployment"
        },
        lane.namespace,
        lane.name
    );
    let _ = write!(
        svg,
        r##"<text x="8" y="{:.1}" fill="#5b21b6">{}<title>{}</title></text><line x1="{LEFT}" y1="{mid:.1}" x2="{:.1}" y2="{mid:.1}" stroke="#ede9fe"/>"##,
        mid + 4.0,
        escape(&short(&label, 40)),
        escape(&label),
        WIDTH - 20.0,
    );
    // The span of the Memcached: from its first entry to its deletion (or the end).
    let mut born = None;
    let mut dying = None;
    let mut spans = Vec::new();
    for e in &lane.entries {
        if let Observation::Memcached {
            change,
            terminating,
            ..
        } = &e.observation
        {
            born.get_or_insert(e.time);
            if *terminating {
                dying.get_or_insert(e.time);
            }
            if *change == Change::Deleted {
                spans.push((born.take().unwrap_or(e.time), dying.take(), e.time));
            }
        }
    }
    if let Some(from) = born {
        spans.push((from, dying, end));
    }
    for (from, dying, to) in spans {
        let x1 = scale.x(from);
        let x2 = scale.x(to).max(x1 + 2.0);
        let _ = write!(
            svg,
            r##"<rect x="{x1:.1}" y="{:.1}" width="{:.1}" height="6" rx="2" fill="#ddd6fe"/>"##,
            mid - 3.0,
            x2 - x1
        );
        if let Some(t) = dying {
            let xt = scale.x(t);
            let _ = write!(
                svg,
                r##"<rect x="{xt:.1}" y="{:.1}" width="{:.1}" height="6" fill="#fca5a5"><title>terminating</title></rect>"##,
                mid - 3.0,
                (x2 - xt).max(2.0)
            );
        }
    }
    // Each tick is labelled with what changed most, unless that would run into the
    // previous label of its row.
    let mut previous: Option<(Option<i64>, bool, bool, usize)> = None;
    let mut last_label: [(String, f64); 2] = [(String::new(), f64::MIN), (String::new(), f64::MIN)];
    // Drawn after the ticks, on a white halo, so that a later tick does not hide them.
    let mut labels = String::new();
    for e in &lane.entries {
        let x = scale.x(e.time);
        let (row, color, label) = match &e.observation {
            Observation::Memcached {
                change,
                size,
                finalizer,
                terminating,
                nodes,
                ..
            } => {
                let now = (*size, *finalizer, *terminating, *nodes);
                let label = memcached_label(*change, previous, now);
                previous = (*change != Change::Deleted).then_some(now);
                (0, "#7c3aed", label)
            }
            Observation::Deployment {
                ready,
                replicas,
                change,
                ..
            } => (
                1,
                "#0891b2",
                if *change == Change::Deleted {
                    "gone".to_string()
                } else {
                    format!("{ready}/{replicas}")
                },
            ),
            _ => continue,
        };
        let (y1, y2) = if row == 0 {
            (y + 3.0, mid - 1.0)
        } else {
            (mid + 1.0, y + LANE - 3.0)
        };
        let _ = write!(
            svg,
            r##"<line x1="{x:.1}" y1="{y1:.1}" x2="{x:.1}" y2="{y2:.1}" stroke="{color}" stroke-width="2"><title>{}</title></line>"##,
            tooltip(e, scale)
        );
        let (shown, at) = &last_label[row];
        let width = label.chars().count() as f64 * 5.5;
        // Right of the tick, or left of it at the right edge.
        let (lx, anchor) = if x + 3.0 + width < WIDTH {
            (x + 3.0, "start")
        } else {
            (x - 3.0, "end")
        };
        let start = if anchor == "start" { lx } else { lx - width };
        if label.is_empty() || *shown == label || start < at + 4.0 {
            continue;
        }
        let _ = write!(
            labels,
            r##"<text x="{lx:.1}" y="{:.1}" fill="{color}" font-size="10" text-anchor="{anchor}" stroke="white" stroke-width="3" paint-order="stroke">{}</text>"##,
            if row == 0 { y + 11.0 } else { y + LANE - 4.0 },
            escape(&label)
        );
        last_label[row] = (label, start + width);
    }
    svg.push_str(&labels);
}

/// The label of a Memcached's change on its lane: what changed that matters most, given
/// `(size, finalizer, terminating, nodes)` before and now; empty when only the generation
/// did.
fn memcached_label(
    change: Change,
    before: Option<(Option<i64>, bool, bool, usize)>,
    (size, finalizer, terminating, nodes): (Option<i64>, bool, bool, usize),
) -> String {
    let size_text = || {
        format!(
            "size {}",
            size.map_or_else(|| "?".into(), |s| s.to_string())
        )
    };
    match before {
        _ if change == Change::Deleted => "gone".into(),
        None => size_text(),
        Some((_, _, was, _)) if terminating && !was => "terminating".into(),
        Some((was, ..)) if size != was => size_text(),
        Some((.., was)) if nodes != was => {
            format!("{nodes} node{}", if nodes == 1 { "" } else { "s" })
        }
        Some((_, was, ..)) if finalizer != was => if finalizer {
            "+finalizer"
        } else {
            "−finalizer"
        }
        .into(),
        Some(_) => String::new(),
    }
}

/// Draws the one lane standing for many Memcached objects at `y`: every change as a faint
/// tick, and step lines of how many exist (grey) and how many list as many pods as their
/// size (green), with the counts at the end beside the lane's name.
fn draw_summary_lane(
    svg: &mut String,
    lanes: &[ObjectLane<'_>],
    y: f64,
    scale: &Scale,
    end: DateTime<Utc>,
) {
    let h = SUMMARY_LANE;
    let memcacheds = lanes.iter().filter(|l| l.memcached).count();
    let deployments = lanes.len() - memcacheds;
    let label = if deployments == 0 {
        format!("{memcacheds} Memcached")
    } else {
        format!("{memcacheds} Memcached, {deployments} other Deployment(s)")
    };
    let mut all: Vec<&Entry> = lanes
        .iter()
        .flat_map(|l| l.entries.iter().copied())
        .collect();
    all.sort_by_key(|e| e.time);
    for e in &all {
        let x = scale.x(e.time);
        let (color, y1, y2) = match &e.observation {
            Observation::Memcached { .. } => ("#7c3aed", y + 2.0, y + h / 2.0),
            _ => ("#0891b2", y + h / 2.0, y + h - 2.0),
        };
        let _ = write!(
            svg,
            r##"<line x1="{x:.1}" y1="{y1:.1}" x2="{x:.1}" y2="{y2:.1}" stroke="{color}" stroke-width="1.5" opacity="0.35"><title>{}</title></line>"##,
            tooltip(e, scale)
        );
    }
    // Counts over time, from the Memcached entries.
    let mut state: std::collections::BTreeMap<(&str, &str), bool> = Default::default();
    let mut existing = vec![(scale.origin, 0usize)];
    let mut converged = vec![(scale.origin, 0usize)];
    for e in &all {
        if let Observation::Memcached {
            namespace,
            name,
            change,
            size,
            nodes,
            ..
        } = &e.observation
        {
            let key = (namespace.as_str(), name.as_str());
            if *change == Change::Deleted {
                state.remove(&key);
            } else {
                state.insert(key, *size == Some(*nodes as i64));
            }
            existing.push((e.time, state.len()));
            converged.push((e.time, state.values().filter(|c| **c).count()));
        }
    }
    let most = existing.iter().map(|(_, n)| *n).max().unwrap_or(0).max(1) as f64;
    let step_line = |points: &[(DateTime<Utc>, usize)], color: &str| {
        let mut path = String::new();
        let mut last_y = None;
        for (t, n) in points {
            let x = scale.x(*t);
            let py = y + h - 3.0 - (*n as f64 / most) * (h - 6.0);
            match last_y {
                None => {
                    let _ = write!(path, "M{x:.1},{py:.1}");
                }
                Some(ly) => {
                    let _ = write!(path, " L{x:.1},{ly:.1} L{x:.1},{py:.1}");
                }
            }
            last_y = Some(py);
        }
        if let Some(ly) = last_y {
            let _ = write!(path, " L{:.1},{ly:.1}", scale.x(end));
        }
        format!(r##"<path d="{path}" fill="none" stroke="{color}" stroke-width="2"/>"##)
    };
    svg.push_str(&step_line(&existing, "#6b7280"));
    svg.push_str(&step_line(&converged, "#059669"));
    let (now_existing, now_converged) = (
        existing.last().map_or(0, |(_, n)| *n),
        converged.last().map_or(0, |(_, n)| *n),
    );
    let _ = write!(
        svg,
        r##"<text x="8" y="{:.1}" fill="#5b21b6">{}</text><text x="8" y="{:.1}" fill="#6b7280" font-size="10">grey: existing, {now_existing} at the end</text><text x="8" y="{:.1}" fill="#059669" font-size="10">green: listing their pods, {now_converged} at the end</text>"##,
        y + h / 2.0 - 8.0,
        escape(&label),
        y + h / 2.0 + 5.0,
        y + h / 2.0 + 17.0,
    );
}

/// Draws the Event rows from `y`: one row per kind of object, each Event a marker (a grey
/// dot, a red diamond for a Warning) whose tooltip says what it was about and its message,
/// labelled above with its reason where the reason changes and the label has room.
fn draw_event_rows(svg: &mut String, rows: &[(String, Vec<&Entry>)], y: f64, scale: &Scale) {
    for (i, (kind, entries)) in rows.iter().enumerate() {
        let ry = y + i as f64 * EVENT_ROW;
        let mid = ry + EVENT_ROW - 7.0;
        let _ = write!(
            svg,
            r##"<text x="8" y="{:.1}" fill="#334155" font-size="11">events on {} ({})</text><line x1="{LEFT}" y1="{mid:.1}" x2="{:.1}" y2="{mid:.1}" stroke="#f1f5f9"/>"##,
            mid + 4.0,
            escape(&short(kind, 24)),
            entries.len(),
            WIDTH - 20.0,
        );
        let mut last_label: (&str, f64) = ("", f64::MIN);
        for e in entries {
            let Observation::Event { type_, reason, .. } = &e.observation else {
                continue;
            };
            let x = scale.x(e.time);
            let title = tooltip(e, scale);
            if type_ == "Warning" {
                let _ = write!(
                    svg,
                    r##"<path d="M{x:.1},{:.1} l4,4 l-4,4 l-4,-4 z" fill="#dc2626" opacity="0.85"><title>{title}</title></path>"##,
                    mid - 4.0
                );
            } else {
                let _ = write!(
                    svg,
                    r##"<circle cx="{x:.1}" cy="{mid:.1}" r="3.5" fill="#475569" opacity="0.75"><title>{title}</title></circle>"##
                );
            }
            let width = reason.chars().count() as f64 * 5.0;
            let lx = (x - 3.0).min(WIDTH - 20.0 - width);
            if reason != last_label.0 && lx >= last_label.1 + 6.0 {
                let _ = write!(
                    svg,
                    r##"<text x="{lx:.1}" y="{:.1}" fill="{}" font-size="9">{}</text>"##,
                    mid - 6.0,
                    if type_ == "Warning" {
                        "#b91c1c"
                    } else {
                        "#475569"
                    },
                    escape(reason)
                );
                last_label = (reason, lx + width);
            }
        }
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
    // A line per failover above the lanes.
    let annotated = failovers.iter().filter(|f| f.to_lock.is_some()).count();
    let top = TOP + annotated.saturating_sub(1) as f64 * 14.0;
    let faults = fault_spans(history);
    let fault_lane = replicas.len() as f64;
    let objects = object_lanes(history);
    let events = event_rows(history);
    let objects_top = top + (replicas.len() as f64 + 1.0 + faults.len().min(8) as f64 * 0.5) * LANE;
    let objects_height = if objects.len() > OBJECT_LANES {
        SUMMARY_LANE
    } else {
        objects.len() as f64 * LANE
    };
    let events_top = objects_top + objects_height + if events.is_empty() { 0.0 } else { 6.0 };
    let height = events_top + events.len() as f64 * EVENT_ROW + 40.0;
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
            top - 8.0,
            height - 30.0,
            height - 14.0
        );
        t += step;
    }
    for (i, replica) in replicas.iter().enumerate() {
        let y = top + i as f64 * LANE;
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
            let y = top + i as f64 * LANE + 8.0;
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
            let y = top + i as f64 * LANE;
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
    let y0 = top + fault_lane * LANE;
    let _ = write!(
        svg,
        r##"<text x="8" y="{:.1}" fill="#b45309">faults</text>"##,
        y0 + LANE / 2.0 + 4.0
    );
    for (k, f) in faults.iter().enumerate() {
        let y = y0 + 6.0 + (k % 8) as f64 * (LANE * 0.5);
        let x1 = scale.x(f.from);
        let x2 = scale.x(f.to.unwrap_or(end)).max(x1 + 3.0);
        // The label goes right of the span when it fits, else inside it from the left,
        // else it ends at the right edge (shortened to the lanes' width; the tooltip has it
        // whole).
        const CHAR: f64 = 6.2;
        let label_width = f.label.chars().count() as f64 * CHAR;
        let (label_x, anchor, text) = if x2 + 4.0 + label_width < WIDTH {
            (x2 + 4.0, "start", f.label.clone())
        } else if x1 + 4.0 + label_width < WIDTH {
            (x1 + 4.0, "start", f.label.clone())
        } else {
            let room = ((WIDTH - 4.0 - LEFT) / CHAR) as usize;
            (WIDTH - 4.0, "end", short(&f.label, room))
        };
        let _ = write!(
            svg,
            r##"<rect x="{x1:.1}" y="{y:.1}" width="{:.1}" height="12" fill="#f59e0b" opacity="0.6"><title>{}</title></rect><text x="{label_x:.1}" y="{:.1}" fill="#78350f" font-size="11" text-anchor="{anchor}">{}</text>"##,
            x2 - x1,
            escape(&f.label),
            y + 10.0,
            escape(&text)
        );
    }
    if objects.len() > OBJECT_LANES {
        draw_summary_lane(&mut svg, &objects, objects_top, &scale, end);
    } else {
        for (i, lane) in objects.iter().enumerate() {
            draw_object_lane(&mut svg, lane, objects_top + i as f64 * LANE, &scale, end);
        }
    }
    draw_event_rows(&mut svg, &events, events_top, &scale);
    // Each failed check's label on a line of its own, from the bottom of the lanes up.
    for (line, v) in verdicts.iter().filter(|v| !v.passed).enumerate() {
        if let (Some(first), Some(last)) = (v.evidence.first(), v.evidence.last()) {
            let x1 = scale.x(first.time);
            let x2 = scale.x(last.time).max(x1 + 4.0);
            let _ = write!(
                svg,
                r##"<rect x="{x1:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="#dc2626" opacity="0.12"><title>{}: {}</title></rect><text x="{x2:.1}" y="{:.1}" fill="#dc2626" text-anchor="end" font-weight="bold">✘ {}</text>"##,
                top - 4.0,
                x2 - x1,
                replicas.len() as f64 * LANE + 4.0,
                escape(v.checker),
                escape(&v.summary),
                top + replicas.len() as f64 * LANE - 4.0 - line as f64 * 14.0,
                escape(v.checker)
            );
        }
    }
    for (line, f) in failovers.iter().filter(|f| f.to_lock.is_some()).enumerate() {
        let x1 = scale.x(f.fault.time);
        if let Some(d) = f.to_lock {
            let x2 = scale.x(f.fault.time + chrono::Duration::from_std(d).unwrap_or_default());
            let y = top - 22.0 - line as f64 * 14.0;
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
<div class="legend"><span style="color:#2563eb">■ leader</span><span style="color:#059669">| write</span><span style="color:#9ca3af">| election write</span><span style="color:#dc2626">| failed write</span><span style="color:#f59e0b">■ fault in force</span><span style="color:#7c3aed">| Memcached</span><span style="color:#0891b2">| its Deployment (ready/replicas)</span><span style="color:#f87171">■ terminating</span><span style="color:#475569">● event</span><span style="color:#dc2626">◆ warning</span></div>
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
#[serde(rename_all = "camelCase")]
pub struct ScenarioSummary {
    /// Scenario name.
    pub name: String,
    /// Relative link to its timeline.
    pub link: String,
    /// Whether every check passed.
    pub passed: bool,
    /// Failover figures, e.g. `crash: 1234 ms`.
    pub failovers: Vec<String>,
    /// How long the scenario took, set-up and teardown included.
    pub seconds: f64,
    /// The failed step and its error, when it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
    /// The kind of guarantee the failure breached, when the failed step checks one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub breach: Option<crate::check::Breach>,
    /// When the breached guarantee is one client-go's documented semantics do not promise:
    /// why opconform holds operators to it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ours: Option<String>,
    /// Whether the history's own safety checks (single leader, single writer, transitions)
    /// failed.
    #[serde(skip)]
    pub history_breached_safety: bool,
}

/// What the index page says about a run.
#[derive(Debug, Clone, Copy)]
pub struct SuiteSummary<'a> {
    /// The provider the scenarios ran on.
    pub provider: &'a str,
    /// When the run started (RFC 3339).
    pub started_at: &'a str,
    /// The run's wall time.
    pub wall: std::time::Duration,
    /// Every scenario of the run.
    pub scenarios: &'a [ScenarioSummary],
}

/// Renders the index page: the run (provider, start, wall time, counts), then the failed
/// scenarios with their failed step, then the passed ones.
pub fn index_html(suite: &SuiteSummary<'_>) -> String {
    let mut ordered: Vec<&ScenarioSummary> = suite.scenarios.iter().collect();
    ordered.sort_by_key(|s| s.passed);
    let rows: String = ordered
        .iter()
        .map(|s| {
            let name = if s.link.is_empty() {
                escape(&s.name)
            } else {
                format!(r#"<a href="{}">{}</a>"#, escape(&s.link), escape(&s.name))
            };
            let failure = s
                .failure
                .as_deref()
                .map(|f| format!(r#"<div class="failure">{}</div>"#, escape(f)))
                .unwrap_or_default();
            format!(
                r#"<tr><td style="color:{}">{}</td><td>{name}{failure}</td><td class="n">{:.1} s</td><td>{}</td></tr>"#,
                if s.passed { "#059669" } else { "#dc2626" },
                if s.passed { "✔" } else { "✘" },
                s.seconds,
                escape(&s.failovers.join(", "))
            )
        })
        .collect();
    let passed = suite.scenarios.iter().filter(|s| s.passed).count();
    let failed = suite.scenarios.len() - passed;
    format!(
        r#"<!doctype html><html><head><meta charset="utf-8"><title>opconform scenarios</title><style>body {{ font-family: system-ui, sans-serif; margin: 24px; }} td, th {{ padding: 4px 10px; border-bottom: 1px solid #e5e7eb; text-align: left; vertical-align: top; }} td.n {{ text-align: right; white-space: nowrap; }} .failure {{ color: #dc2626; font-family: monospace; white-space: pre-wrap; margin-top: 4px; }}</style></head><body><h1>opconform scenarios</h1><p>on <b>{provider}</b>, started {started}, {wall:.1} s: {total} scenario(s), {passed} passed, {failed} failed</p><table><tr><th></th><th>scenario</th><th>took</th><th>failover</th></tr>{rows}</table></body></html>"#,
        provider = escape(suite.provider),
        started = escape(suite.started_at),
        wall = suite.wall.as_secs_f64(),
        total = suite.scenarios.len(),
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
    fn two_failovers_are_annotated_on_lines_of_their_own() {
        let h = sample();
        let f = failover(&h, "hold").unwrap();
        let html = timeline_html("twice", &h, &[], &[f.clone(), f]);
        let lines: Vec<&str> = html
            .match_indices(r##"stroke="#7c3aed" stroke-width="2"/>"##)
            .map(|(i, _)| {
                let start = html[..i].rfind("<line").unwrap();
                let y1 = html[start..].split("y1=\"").nth(1).unwrap();
                y1.split('"').next().unwrap()
            })
            .collect();
        assert_eq!(lines.len(), 2);
        assert_ne!(
            lines[0], lines[1],
            "the second failover is drawn over the first"
        );
    }

    fn memcached(h: &mut History, ms: i64, name: &str, change: Change, size: i64, nodes: usize) {
        let t0 = DateTime::from_timestamp_millis(1_800_000_000_000).unwrap();
        h.push(
            t0 + chrono::Duration::milliseconds(ms),
            Observation::Memcached {
                namespace: "default".into(),
                name: name.into(),
                change,
                size: Some(size),
                generation: 1,
                finalizer: true,
                terminating: change == Change::Deleted,
                nodes,
            },
        );
    }

    fn deployment(h: &mut History, ms: i64, name: &str, ready: i32) {
        let t0 = DateTime::from_timestamp_millis(1_800_000_000_000).unwrap();
        h.push(
            t0 + chrono::Duration::milliseconds(ms),
            Observation::Deployment {
                namespace: "default".into(),
                name: name.into(),
                change: Change::Modified,
                replicas: 3,
                ready,
                available: ready,
                owner: Some(format!("Memcached/{name}")),
                terminating: false,
            },
        );
    }

    fn event(h: &mut History, ms: i64, reason: &str, type_: &str, message: &str) {
        let t0 = DateTime::from_timestamp_millis(1_800_000_000_000).unwrap();
        h.push(
            t0 + chrono::Duration::milliseconds(ms),
            Observation::Event {
                namespace: "default".into(),
                involved: "Memcached/cache".into(),
                type_: type_.into(),
                reason: reason.into(),
                message: message.into(),
                reporter: "memcached-operator".into(),
                instance: "op-a".into(),
                count: 1,
            },
        );
    }

    #[test]
    fn a_memcached_gets_a_lane_with_its_deployment_and_events_a_row_per_kind_of_object() {
        let mut h = sample();
        memcached(&mut h, 100, "cache", Change::Added, 3, 0);
        deployment(&mut h, 300, "cache", 0);
        deployment(&mut h, 800, "cache", 3);
        memcached(&mut h, 900, "cache", Change::Modified, 3, 3);
        memcached(&mut h, 2900, "cache", Change::Deleted, 3, 3);
        event(&mut h, 300, "Created", "Normal", "created deployment cache");
        event(&mut h, 2800, "Finalized", "Normal", "removed default.cache");
        event(&mut h, 1500, "ReconcileError", "Warning", "a <bad> thing");
        let html = timeline_html("objects", &h, &[], &[]);
        assert_eq!(html.matches(">memcached default/cache<title>").count(), 1);
        assert!(html.contains(">size 3</text>") && html.contains(">3/3</text>"));
        assert!(html.contains(">3 nodes</text>") && html.contains(">gone</text>"));
        assert!(html.contains("events on Memcached (3)"));
        assert!(html.contains(">Created</text>") && html.contains(">ReconcileError</text>"));
        assert!(html.contains("Warning ReconcileError: a &lt;bad&gt; thing"));
        assert!(html.contains("<title>terminating</title>"));
        assert_eq!(html.matches("<circle").count(), 2, "two Normal events");
        assert_eq!(
            html.matches(r##"fill="#dc2626" opacity="0.85""##).count(),
            1
        );
    }

    #[test]
    fn a_memcached_tick_is_labelled_with_what_changed_most() {
        let was = Some((Some(3), true, false, 2));
        assert_eq!(
            memcached_label(Change::Added, None, (Some(3), false, false, 0)),
            "size 3"
        );
        assert_eq!(
            memcached_label(Change::Modified, was, (Some(4), true, false, 3)),
            "size 4"
        );
        assert_eq!(
            memcached_label(Change::Modified, was, (Some(3), true, false, 1)),
            "1 node"
        );
        assert_eq!(
            memcached_label(Change::Modified, was, (Some(3), true, true, 1)),
            "terminating"
        );
        assert_eq!(
            memcached_label(Change::Modified, was, (Some(3), false, false, 2)),
            "−finalizer"
        );
        assert_eq!(
            memcached_label(Change::Modified, was, (Some(3), true, false, 2)),
            ""
        );
        assert_eq!(
            memcached_label(Change::Deleted, was, (Some(3), true, true, 2)),
            "gone"
        );
    }

    #[test]
    fn many_memcached_share_one_summary_lane() {
        let mut h = sample();
        for i in 0..50 {
            let name = format!("cache-{i}");
            memcached(&mut h, 100 + i, &name, Change::Added, 1, 0);
            deployment(&mut h, 500 + i * 10, &name, 1);
            memcached(&mut h, 1000 + i * 20, &name, Change::Modified, 1, 1);
        }
        let html = timeline_html("many", &h, &[], &[]);
        assert!(!html.contains(">memcached default/cache-0<"));
        assert!(html.contains(">50 Memcached<"));
        assert!(
            html.contains("existing, 50 at the end")
                && html.contains("listing their pods, 50 at the end")
        );
        assert!(html.matches("<title>").count() >= 150);
    }

    #[test]
    fn reports_follow_cargo_target_dir_when_it_is_set() {
        let repo = Path::new("/src/op");
        assert_eq!(
            reports_root_from(None, repo),
            Path::new("/src/op/target/opconform")
        );
        assert_eq!(
            reports_root_from(Some("".into()), repo),
            Path::new("/src/op/target/opconform")
        );
        assert_eq!(
            reports_root_from(Some("/shared/target".into()), repo),
            Path::new("/shared/target/opconform")
        );
        assert_eq!(
            reports_root_from(Some("build".into()), repo),
            Path::new("/src/op/build/opconform")
        );
    }

    #[test]
    fn the_index_links_every_scenario_with_its_verdict() {
        let scenario = |name: &str, passed: bool| ScenarioSummary {
            name: name.into(),
            link: format!("{name}/timeline.html"),
            passed,
            failovers: vec!["crash: 12 ms".into()],
            seconds: 4.25,
            failure: (!passed).then(|| "Then within 20s another replica leads: <none>".into()),
            breach: None,
            ours: None,
            history_breached_safety: false,
        };
        let html = index_html(&SuiteSummary {
            provider: "local",
            started_at: "2026-11-25T18:00:00Z",
            wall: std::time::Duration::from_secs(90),
            scenarios: &[scenario("a", true), scenario("b", false)],
        });
        assert!(
            html.contains(r#"href="a/timeline.html""#)
                && html.contains("crash: 12 ms")
                && html.contains("✘")
                && html.contains("4.2 s")
        );
        assert!(html.contains("on <b>local</b>, started 2026-11-25T18:00:00Z, 90.0 s: 2 scenario(s), 1 passed, 1 failed"));
        // Failed first, with the step that failed, escaped.
        assert!(html.find(">b<").unwrap() < html.find(">a<").unwrap());
        assert!(html.contains("another replica leads: &lt;none&gt;"));
    }
}

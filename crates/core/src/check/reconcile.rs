//! Reconcile behaviour: each reconcile of an object as the operator logged it, and checkers
//! over reconciles and retries — the order of results, retry intervals that never shrink,
//! a resync that keeps its period, nothing run for an object that is gone.
//!
//! The operator's `/metrics` counts results per controller; only its log says which object
//! a reconcile was for and in what order the results came. [`parse_log`] reads the bundled
//! operator's `reconciled` lines in either of its formats (`--log-format text|json`).

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::Verdict;
use crate::record::Entry;

/// One reconcile of one object, as the operator logged it when it ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reconcile {
    /// The replica (pod) that ran it.
    pub replica: String,
    /// When it ended (the log line's time).
    pub at: DateTime<Utc>,
    /// How long it ran.
    pub took: Duration,
    /// The object's namespace.
    pub namespace: String,
    /// The object's name.
    pub name: String,
    /// The result, as the metric labels it: `success`, `error`, `requeue`, `requeue_after`.
    pub result: String,
}

impl Reconcile {
    /// When it started.
    pub fn started(&self) -> DateTime<Utc> {
        self.at - chrono::Duration::from_std(self.took).unwrap_or_default()
    }

    /// `+1.234s ns/name result (took 3 ms, replica)`, relative to `origin`.
    pub fn describe(&self, origin: DateTime<Utc>) -> String {
        format!(
            "{:+10.3}s  {}/{} {} (took {} ms, {})",
            seconds(self.at - origin),
            self.namespace,
            self.name,
            self.result,
            self.took.as_millis(),
            self.replica
        )
    }
}

fn seconds(d: chrono::Duration) -> f64 {
    d.num_microseconds().unwrap_or(0) as f64 / 1e6
}

/// The reconciles in a replica's log, in log order. Lines that are not a `reconciled`
/// line with a namespace, name, result and time are skipped.
pub fn parse_log(replica: &str, log: &str) -> Vec<Reconcile> {
    log.lines()
        .filter_map(|line| parse_line(replica, line))
        .collect()
}

fn parse_line(replica: &str, line: &str) -> Option<Reconcile> {
    let line = strip_ansi(line);
    let line = line.trim();
    let (time, message, fields) = if line.starts_with('{') {
        json_line(line)?
    } else {
        text_line(line)?
    };
    if message != "reconciled" {
        return None;
    }
    let took = fields
        .get("took_ms")
        .and_then(|v| v.parse::<u64>().ok())
        .map_or(Duration::ZERO, Duration::from_millis);
    Some(Reconcile {
        replica: replica.to_string(),
        at: DateTime::parse_from_rfc3339(&time)
            .ok()?
            .with_timezone(&Utc),
        took,
        namespace: fields.get("namespace")?.clone(),
        name: fields.get("name")?.clone(),
        result: fields.get("result")?.clone(),
    })
}

type Line = (String, String, BTreeMap<String, String>);

/// `{"timestamp":…,"message":…,"namespace":…}` (fields flattened or under `fields`).
fn json_line(line: &str) -> Option<Line> {
    let value: serde_json::Value = serde_json::from_str(line).ok()?;
    let mut fields = BTreeMap::new();
    let mut take = |object: &serde_json::Map<String, serde_json::Value>| {
        for (k, v) in object {
            let text = match v {
                serde_json::Value::String(s) => s.clone(),
                serde_json::Value::Object(_) => continue,
                other => other.to_string(),
            };
            fields.insert(k.clone(), text);
        }
    };
    take(value.as_object()?);
    if let Some(nested) = value.get("fields").and_then(|f| f.as_object()) {
        take(nested);
    }
    let time = fields.remove("timestamp")?;
    let message = fields.remove("message")?;
    Some((time, message, fields))
}

/// `2026-01-01T00:00:00.123456Z  INFO span{…}: target: reconciled key=value key="quoted"`:
/// only `reconciled` lines are read (the message follows the event's target and `: `).
fn text_line(line: &str) -> Option<Line> {
    const MESSAGE: &str = ": reconciled";
    let (time, _) = line.split_once(char::is_whitespace)?;
    let at = line.find(MESSAGE)?;
    let rest = &line[at + MESSAGE.len()..];
    if !(rest.is_empty() || rest.starts_with(' ')) {
        return None;
    }
    Some((time.to_string(), "reconciled".into(), text_fields(rest)))
}

/// Where a ` key=` starts at or after `from` (a field's start).
fn next_field(s: &str, from: usize) -> Option<usize> {
    let bytes = s.as_bytes();
    (from..bytes.len()).find(|&i| {
        (i == 0 || bytes[i - 1] == b' ')
            && field_key_len(&s[i..]).is_some_and(|n| bytes.get(i + n) == Some(&b'='))
    })
}

fn field_key_len(s: &str) -> Option<usize> {
    let n = s
        .bytes()
        .take_while(|b| b.is_ascii_alphanumeric() || *b == b'_' || *b == b'.')
        .count();
    (n > 0).then_some(n)
}

/// `key=value key="quoted \" value"` pairs; an unquoted value (a displayed error, say)
/// runs up to the next ` key=`.
fn text_fields(s: &str) -> BTreeMap<String, String> {
    let mut fields = BTreeMap::new();
    let mut at = next_field(s, 0);
    while let Some(start) = at {
        let n = field_key_len(&s[start..]).unwrap_or(0);
        let key = &s[start..start + n];
        let value_start = start + n + 1;
        let after = &s[value_start..];
        let (value, end) = if let Some(quoted) = after.strip_prefix('"') {
            let mut value = String::new();
            let mut end = s.len();
            let mut chars = quoted.char_indices();
            while let Some((i, c)) = chars.next() {
                match c {
                    '\\' => {
                        if let Some((_, escaped)) = chars.next() {
                            value.push(escaped);
                        }
                    }
                    '"' => {
                        end = value_start + 1 + i + 1;
                        break;
                    }
                    other => value.push(other),
                }
            }
            (value, end)
        } else {
            let end = next_field(s, value_start).unwrap_or(s.len());
            (s[value_start..end].trim_end().to_string(), end)
        };
        fields.insert(key.to_string(), value);
        at = next_field(s, end);
    }
    fields
}

/// The line without ANSI colour sequences (`ESC [ … letter`).
fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' && chars.peek() == Some(&'[') {
            chars.next();
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The results in order with consecutive repeats merged: `requeue, success, success` →
/// `requeue, success`.
pub fn collapse<'a>(results: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for r in results {
        if out.last().map(String::as_str) != Some(r) {
            out.push(r.to_string());
        }
    }
    out
}

/// The time between consecutive instants.
pub fn intervals(times: &[DateTime<Utc>]) -> Vec<Duration> {
    times
        .windows(2)
        .map(|w| (w[1] - w[0]).to_std().unwrap_or_default())
        .collect()
}

fn list(intervals: &[Duration]) -> String {
    intervals
        .iter()
        .map(|d| format!("{} ms", d.as_millis()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Retries that back off: at least `retries` retries after the first attempt, each
/// interval at least as long as the one before give or take `slack` (scheduling noise),
/// and the last interval longer than the first by at least `growth` (a fixed interval is
/// not a backoff). `attempts` are the refused requests, in time order.
pub fn backing_off(
    attempts: &[Entry],
    retries: usize,
    slack: Duration,
    growth: Duration,
) -> Verdict {
    const NAME: &str = "retries back off";
    let fail = |summary: String| Verdict {
        checker: NAME,
        passed: false,
        summary,
        evidence: attempts.to_vec(),
    };
    let times: Vec<DateTime<Utc>> = attempts.iter().map(|e| e.time).collect();
    let gaps = intervals(&times);
    if gaps.len() < retries {
        return fail(format!(
            "{} attempt(s), so {} retries; expected at least {retries}",
            attempts.len(),
            gaps.len()
        ));
    }
    for (i, w) in gaps.windows(2).enumerate() {
        if w[1] + slack < w[0] {
            return fail(format!(
                "retry {} came {} ms after the one before, sooner than the {} ms before it (more than {} ms shorter); intervals: {}",
                i + 2,
                w[1].as_millis(),
                w[0].as_millis(),
                slack.as_millis(),
                list(&gaps)
            ));
        }
    }
    let (first, last) = (gaps[0], gaps[gaps.len() - 1]);
    if last < first + growth {
        return fail(format!(
            "the intervals did not grow by {} ms: first {} ms, last {} ms; intervals: {}",
            growth.as_millis(),
            first.as_millis(),
            last.as_millis(),
            list(&gaps)
        ));
    }
    Verdict {
        checker: NAME,
        passed: true,
        summary: format!("{} retries at intervals {}", gaps.len(), list(&gaps)),
        evidence: Vec::new(),
    }
}

/// Reconciles of one object during `from..=to` that recur every `period` give or take
/// `slack`, each ending in `result`: none ends sooner than `period - slack` after the one
/// before, no stretch of the window (its edges included) goes longer than
/// `period + slack` without one, and none ends in another result.
pub fn periodic(
    reconciles: &[Reconcile],
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    period: Duration,
    slack: Duration,
    result: &str,
) -> Result<String, String> {
    let show = |summary: String| {
        let lines: Vec<String> = reconciles.iter().map(|r| r.describe(from)).collect();
        format!(
            "{summary}\nreconciles (time from the start of the window):\n{}",
            lines.join("\n")
        )
    };
    let within: Vec<&Reconcile> = reconciles
        .iter()
        .filter(|r| r.at >= from && r.at <= to)
        .collect();
    if let Some(other) = within.iter().find(|r| r.result != result) {
        return Err(show(format!(
            "a reconcile ended in {} instead of {result}",
            other.result
        )));
    }
    let times: Vec<DateTime<Utc>> = within.iter().map(|r| r.at).collect();
    let gaps = intervals(&times);
    if let Some(early) = gaps.iter().find(|g| **g + slack < period) {
        return Err(show(format!(
            "a reconcile came {} ms after the one before, sooner than {} ms minus {} ms; intervals: {}",
            early.as_millis(),
            period.as_millis(),
            slack.as_millis(),
            list(&gaps)
        )));
    }
    // The window's edges count too: no stretch without a reconcile may last longer.
    let mut edges = vec![from];
    edges.extend(times.iter().copied());
    edges.push(to);
    if let Some(late) = intervals(&edges).iter().find(|g| **g > period + slack) {
        return Err(show(format!(
            "{} ms passed without a reconcile, more than {} ms plus {} ms; {} reconcile(s) in the window at intervals {}",
            late.as_millis(),
            period.as_millis(),
            slack.as_millis(),
            within.len(),
            list(&gaps)
        )));
    }
    Ok(format!(
        "{} reconciles ending in {result} at intervals {}",
        within.len(),
        list(&gaps)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Observation;

    fn at(ms: i64) -> DateTime<Utc> {
        DateTime::from_timestamp_millis(1_800_000_000_000 + ms).unwrap()
    }

    fn refused(ms: &[i64]) -> Vec<Entry> {
        ms.iter()
            .map(|t| Entry {
                time: at(*t),
                observation: Observation::Write {
                    replica: "op-1".into(),
                    verb: "create".into(),
                    resource: "deployments".into(),
                    namespace: "default".into(),
                    name: String::new(),
                    code: 500,
                    election: false,
                },
            })
            .collect()
    }

    fn reconcile(ms: i64, result: &str) -> Reconcile {
        Reconcile {
            replica: "op-1".into(),
            at: at(ms),
            took: Duration::from_millis(3),
            namespace: "default".into(),
            name: "cache".into(),
            result: result.into(),
        }
    }

    #[test]
    fn a_json_reconciled_line_is_read_with_its_object_result_and_duration() {
        let log = concat!(
            r#"{"timestamp":"2026-11-22T14:47:46.005514Z","level":"INFO","message":"serving /metrics","target":"memcached_operator::run"}"#,
            "\n",
            r#"{"timestamp":"2026-11-22T14:47:47.5Z","level":"INFO","message":"reconciled","controller":"memcached","namespace":"default","name":"cache","generation":1,"result":"requeue","requeue_after_ms":5,"took_ms":12,"target":"memcached_operator::controller"}"#,
        );
        let r = parse_log("op-1", log);
        assert_eq!(r.len(), 1);
        assert_eq!(
            (r[0].namespace.as_str(), r[0].name.as_str()),
            ("default", "cache")
        );
        assert_eq!(r[0].result, "requeue");
        assert_eq!(r[0].took, Duration::from_millis(12));
        assert_eq!(r[0].started(), r[0].at - chrono::Duration::milliseconds(12));
    }

    #[test]
    fn a_coloured_text_line_is_read_and_quoted_values_may_hold_spaces_and_equals() {
        let line = "\u{1b}[2m2026-11-22T14:47:46.085670Z\u{1b}[0m \u{1b}[33m WARN\u{1b}[0m \u{1b}[2mmemcached_operator::controller\u{1b}[0m\u{1b}[2m:\u{1b}[0m reconciled \u{1b}[3mcontroller\u{1b}[0m\u{1b}[2m=\u{1b}[0m\"memcached\" \u{1b}[3mnamespace\u{1b}[0m\u{1b}[2m=\u{1b}[0mteam-a \u{1b}[3mname\u{1b}[0m\u{1b}[2m=\u{1b}[0mweb \u{1b}[3mresult\u{1b}[0m\u{1b}[2m=\u{1b}[0m\"error\" error=\"failed to create deployment: name=x \\\"quoted\\\"\" took_ms=4";
        let r = parse_log("op-2", line);
        assert_eq!(r.len(), 1, "{line}");
        assert_eq!(r[0].namespace, "team-a");
        assert_eq!(r[0].name, "web");
        assert_eq!(r[0].result, "error");
        assert_eq!(r[0].took, Duration::from_millis(4));
        assert_eq!(r[0].replica, "op-2");
    }

    #[test]
    fn a_text_line_inside_a_span_and_with_a_displayed_error_is_read() {
        let line = "2026-11-22T15:15:51.650121Z  WARN reconciling object{object.ref=Memcached.v1alpha1.cache.example.com/cache.default object.reason=related object updated: Deployment.v1.apps/cache.default}: memcached_operator::controller: reconciled controller=\"memcached\" namespace=default name=cache generation=1 result=\"error\" error_kind=\"Api\" error=failed to create deployment: ApiError: refused by the scenario: InternalError (code 500) took_ms=454";
        let r = parse_log("op-1", line);
        assert_eq!(r.len(), 1, "{line}");
        assert_eq!(
            (r[0].namespace.as_str(), r[0].name.as_str()),
            ("default", "cache")
        );
        assert_eq!(r[0].result, "error");
        assert_eq!(r[0].took, Duration::from_millis(454));
    }

    #[test]
    fn other_lines_are_skipped() {
        let log = "2026-11-22T14:47:46.005826Z  INFO memcached_operator::run: trying to become the leader (leader-for-life)\nnot a log line\n";
        assert!(parse_log("op-1", log).is_empty());
    }

    #[test]
    fn repeated_results_collapse_into_one() {
        assert_eq!(
            collapse(["requeue", "success", "success", "requeue", "success"]),
            ["requeue", "success", "requeue", "success"]
        );
    }

    #[test]
    fn doubling_retries_back_off() {
        let v = backing_off(
            &refused(&[0, 8, 20, 41, 84, 167]),
            3,
            Duration::from_millis(50),
            Duration::from_millis(50),
        );
        assert!(v.passed, "{}", v.summary);
    }

    #[test]
    fn too_few_retries_shrinking_or_fixed_intervals_are_not_a_backoff() {
        let slack = Duration::from_millis(50);
        let growth = Duration::from_millis(300);
        assert!(!backing_off(&refused(&[0, 100, 300]), 3, slack, growth).passed);
        let shrinking = backing_off(&refused(&[0, 400, 1200, 1300, 2500]), 3, slack, growth);
        assert!(!shrinking.passed);
        assert!(
            shrinking.summary.starts_with("retry 3 came 100 ms"),
            "{}",
            shrinking.summary
        );
        let fixed = backing_off(&refused(&[0, 100, 200, 300, 400]), 3, slack, growth);
        assert!(!fixed.passed);
        assert!(fixed.summary.contains("did not grow"), "{}", fixed.summary);
    }

    #[test]
    fn a_resync_every_period_passes_and_a_missing_or_early_one_fails() {
        let period = Duration::from_secs(2);
        let slack = Duration::from_millis(500);
        let every = [500, 2510, 4530, 6550].map(|t| reconcile(t, "requeue_after"));
        assert!(periodic(&every, at(0), at(7000), period, slack, "requeue_after").is_ok());
        let missing = [500, 2510].map(|t| reconcile(t, "requeue_after"));
        assert!(periodic(&missing, at(0), at(7000), period, slack, "requeue_after").is_err());
        let early = [500, 1000, 2510, 4530].map(|t| reconcile(t, "requeue_after"));
        assert!(periodic(&early, at(0), at(7000), period, slack, "requeue_after").is_err());
        let other = [500, 2510, 4530].map(|t| reconcile(t, "success"));
        let e = periodic(&other, at(0), at(7000), period, slack, "requeue_after").unwrap_err();
        assert!(e.starts_with("a reconcile ended in success"), "{e}");
    }
}

//! The check kube-apiserver 1.34 makes of a CronJob's `spec.schedule`: that robfig/cron
//! v3's `ParseStandard` accepts it (five fields — minute, hour, day of month, month, day of
//! week — with names of months and days, or a `@` descriptor, or `@every <duration>`, after
//! an optional `TZ=`/`CRON_TZ=` zone prefix), refused with the parser's own words, which
//! become the detail of the `spec.schedule` field error.
//!
//! It validates only: it computes no times (the CronJob controller has its own schedule).
//!
//! # Caveats
//! A `TZ=` prefix with nothing after it (`TZ=UTC`) makes robfig/cron slice a string at -1:
//! kube-apiserver 1.34 panics and drops the connection without an answer. Here the zone is
//! the rest, and the schedule is refused for its zero fields.

use super::time_zone;

/// Why `ParseStandard` refuses a schedule, worded as robfig/cron words it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// Not five fields once split on white space (the fields shown as Go prints a slice).
    #[error("expected exactly 5 fields, found {}: [{}]", .0.len(), .0.join(" "))]
    FieldCount(Vec<String>),
    /// The `TZ=`/`CRON_TZ=` prefix names a zone Go cannot load.
    #[error("provided bad location {zone}: {error}")]
    Location {
        /// The zone named.
        zone: String,
        /// Why it could not be loaded.
        #[source]
        error: time_zone::Error,
    },
    /// A `@` word that is not one of the descriptors.
    #[error("unrecognized descriptor: {0}")]
    Descriptor(String),
    /// `@every` followed by what Go's `time.ParseDuration` refuses.
    #[error("failed to parse duration {descriptor}: {reason}")]
    Duration {
        /// The whole descriptor.
        descriptor: String,
        /// `time.ParseDuration`'s error.
        reason: String,
    },
    /// A range with more than one `-`.
    #[error("too many hyphens: {0}")]
    Hyphens(String),
    /// A range with more than one `/`.
    #[error("too many slashes: {0}")]
    Slashes(String),
    /// A number `strconv.Atoi` refuses.
    #[error("failed to parse int from {text}: strconv.Atoi: parsing {}: {reason}", go_quote(.text))]
    Int {
        /// The text.
        text: String,
        /// `invalid syntax` or `value out of range`.
        reason: &'static str,
    },
    /// A negative step.
    #[error("negative number ({number}) not allowed: {text}")]
    Negative {
        /// The number.
        number: i64,
        /// Its text.
        text: String,
    },
    /// A range starting below the field's minimum.
    #[error("beginning of range ({start}) below minimum ({min}): {range}")]
    BelowMinimum {
        /// Where it starts.
        start: u64,
        /// The field's minimum.
        min: u64,
        /// The range.
        range: String,
    },
    /// A range ending above the field's maximum.
    #[error("end of range ({end}) above maximum ({max}): {range}")]
    AboveMaximum {
        /// Where it ends.
        end: u64,
        /// The field's maximum.
        max: u64,
        /// The range.
        range: String,
    },
    /// A range that starts after it ends.
    #[error("beginning of range ({start}) beyond end of range ({end}): {range}")]
    Reversed {
        /// Where it starts.
        start: u64,
        /// Where it ends.
        end: u64,
        /// The range.
        range: String,
    },
    /// A step of zero.
    #[error("step of range should be a positive number: {0}")]
    ZeroStep(String),
}

/// A field's bounds and the names it accepts for its values (lower case, from its minimum).
struct Bounds {
    min: u64,
    max: u64,
    names: &'static [&'static str],
}

const MINUTES: Bounds = Bounds::plain(0, 59);
const HOURS: Bounds = Bounds::plain(0, 23);
const DAYS_OF_MONTH: Bounds = Bounds::plain(1, 31);
const MONTHS: Bounds = Bounds {
    min: 1,
    max: 12,
    names: &[
        "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
    ],
};
const DAYS_OF_WEEK: Bounds = Bounds {
    min: 0,
    max: 6,
    names: &["sun", "mon", "tue", "wed", "thu", "fri", "sat"],
};

impl Bounds {
    /// A field of numbers only.
    const fn plain(min: u64, max: u64) -> Self {
        Self {
            min,
            max,
            names: &[],
        }
    }
}

/// Checks `schedule` as `cron.ParseStandard` parses it.
///
/// # Errors
/// The first thing the parser refuses, in its order: the zone prefix, the descriptor or
/// the count of fields, then the fields from minute to day of week.
pub fn check(schedule: &str) -> Result<(), Error> {
    let mut spec = schedule;
    if spec.starts_with("TZ=") || spec.starts_with("CRON_TZ=") {
        let equals = spec.find('=').unwrap_or_default();
        let space = spec.find(' ').unwrap_or(spec.len());
        let zone = &spec[equals + 1..space];
        time_zone::load(zone).map_err(|error| Error::Location {
            zone: zone.to_string(),
            error,
        })?;
        spec = spec[space..].trim();
    }
    if spec.starts_with('@') {
        return check_descriptor(spec);
    }
    let fields: Vec<&str> = spec.split_whitespace().collect();
    if fields.len() != 5 {
        return Err(Error::FieldCount(
            fields.into_iter().map(str::to_string).collect(),
        ));
    }
    for (field, bounds) in
        fields
            .iter()
            .zip([&MINUTES, &HOURS, &DAYS_OF_MONTH, &MONTHS, &DAYS_OF_WEEK])
    {
        for range in field.split(',').filter(|r| !r.is_empty()) {
            check_range(range, bounds)?;
        }
    }
    Ok(())
}

fn check_descriptor(descriptor: &str) -> Result<(), Error> {
    const EVERY: &str = "@every ";
    match descriptor {
        "@yearly" | "@annually" | "@monthly" | "@weekly" | "@daily" | "@midnight" | "@hourly" => {
            Ok(())
        }
        _ => match descriptor.strip_prefix(EVERY) {
            Some(duration) => go_duration(duration).map_err(|reason| Error::Duration {
                descriptor: descriptor.to_string(),
                reason,
            }),
            None => Err(Error::Descriptor(descriptor.to_string())),
        },
    }
}

/// `getRange`: `*`, `?`, a value or `a-b`, each with an optional `/step`.
fn check_range(range: &str, bounds: &Bounds) -> Result<(), Error> {
    let range_and_step: Vec<&str> = range.split('/').collect();
    let low_and_high: Vec<&str> = range_and_step[0].split('-').collect();
    let (start, mut end) = if low_and_high[0] == "*" || low_and_high[0] == "?" {
        (bounds.min, bounds.max)
    } else {
        let start = int_or_name(low_and_high[0], bounds.names, bounds.min)?;
        match low_and_high.len() {
            1 => (start, start),
            2 => (
                start,
                int_or_name(low_and_high[1], bounds.names, bounds.min)?,
            ),
            _ => return Err(Error::Hyphens(range.to_string())),
        }
    };
    let step = match range_and_step.len() {
        1 => 1,
        2 => {
            // "N/step" runs from N to the maximum.
            if low_and_high.len() == 1 {
                end = bounds.max;
            }
            non_negative_int(range_and_step[1])?
        }
        _ => return Err(Error::Slashes(range.to_string())),
    };
    let range = range.to_string();
    if start < bounds.min {
        return Err(Error::BelowMinimum {
            start,
            min: bounds.min,
            range,
        });
    }
    if end > bounds.max {
        return Err(Error::AboveMaximum {
            end,
            max: bounds.max,
            range,
        });
    }
    if start > end {
        return Err(Error::Reversed { start, end, range });
    }
    if step == 0 {
        return Err(Error::ZeroStep(range));
    }
    Ok(())
}

/// `parseIntOrName`: a name of the field (any case), else a number.
fn int_or_name(text: &str, names: &[&str], first: u64) -> Result<u64, Error> {
    match names.iter().position(|n| n.eq_ignore_ascii_case(text)) {
        Some(i) => Ok(first + u64::try_from(i).unwrap_or_default()),
        None => non_negative_int(text),
    }
}

/// `mustParseInt`: `strconv.Atoi` (an optional sign, decimal digits, 64 bits), not negative.
fn non_negative_int(text: &str) -> Result<u64, Error> {
    let int_error = |reason| Error::Int {
        text: text.to_string(),
        reason,
    };
    let digits = text.strip_prefix(['+', '-']).unwrap_or(text);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(int_error("invalid syntax"));
    }
    let number: i64 = text.parse().map_err(|_| int_error("value out of range"))?;
    u64::try_from(number).map_err(|_| Error::Negative {
        number,
        text: text.to_string(),
    })
}

/// Go's `time.ParseDuration`: an optional sign, then numbers (with an optional fraction)
/// each followed by a unit; `0` alone needs none.
fn go_duration(text: &str) -> Result<(), String> {
    let invalid = || format!("time: invalid duration {}", go_quote(text));
    let mut rest = text.strip_prefix(['+', '-']).unwrap_or(text);
    if rest == "0" {
        return Ok(());
    }
    if rest.is_empty() {
        return Err(invalid());
    }
    let mut total: f64 = 0.0;
    while !rest.is_empty() {
        let whole = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        let mut number_end = whole;
        let mut fraction = 0;
        if rest[whole..].starts_with('.') {
            let after = &rest[whole + 1..];
            fraction = after.len() - after.trim_start_matches(|c: char| c.is_ascii_digit()).len();
            number_end = whole + 1 + fraction;
        }
        if whole == 0 && fraction == 0 {
            return Err(invalid());
        }
        let number = &rest[..number_end];
        rest = &rest[number_end..];
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let unit = &rest[..unit_end];
        if unit.is_empty() {
            return Err(format!("time: missing unit in duration {}", go_quote(text)));
        }
        let nanos_per_unit = match unit {
            "ns" => 1.0,
            "us" | "\u{b5}s" | "\u{3bc}s" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            _ => {
                return Err(format!(
                    "time: unknown unit {} in duration {}",
                    go_quote(unit),
                    go_quote(text)
                ));
            }
        };
        let value: f64 = number.parse().map_err(|_| invalid())?;
        total += value * nanos_per_unit;
        if total > i64::MAX as f64 {
            return Err(invalid());
        }
        rest = &rest[unit_end..];
    }
    Ok(())
}

/// A string quoted as Go's `strconv.Quote` and `time`'s `quote` quote printable ASCII.
fn go_quote(text: &str) -> String {
    let mut quoted = String::from("\"");
    for c in text.chars() {
        match c {
            '"' | '\\' => {
                quoted.push('\\');
                quoted.push(c);
            }
            c if c.is_ascii_control() => quoted.push_str(&format!("\\x{:02x}", c as u32)),
            c => quoted.push(c),
        }
    }
    quoted.push('"');
    quoted
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(schedule: &str) -> String {
        check(schedule).unwrap_err().to_string()
    }

    #[test]
    fn standard_schedules_descriptors_and_names_are_accepted() {
        for schedule in [
            "*/15 * * * *",
            "0 0 1,15 * ?",
            "30 2 * jan-MAR mon-fri",
            "5/10 1-5/2 ? * *",
            "@hourly",
            "@annually",
            "@every 1h30m",
            "@every 1.5s",
            "@every 0",
            "TZ=UTC 0 * * * *",
            "CRON_TZ=Europe/Paris @daily",
            "0 0 ,1 * *",
        ] {
            assert_eq!(check(schedule), Ok(()), "{schedule}");
        }
    }

    #[test]
    fn a_schedule_of_the_wrong_field_count_is_refused_with_its_fields_as_go_prints_them() {
        assert_eq!(
            refusal("* * * *"),
            "expected exactly 5 fields, found 4: [* * * *]"
        );
        assert_eq!(
            refusal("0 0 * * * *"),
            "expected exactly 5 fields, found 6: [0 0 * * * *]"
        );
    }

    #[test]
    fn fields_out_of_range_or_malformed_are_refused_with_robfig_crons_words() {
        assert_eq!(
            refusal("60 * * * *"),
            "end of range (60) above maximum (59): 60"
        );
        assert_eq!(
            refusal("0 0 0 * *"),
            "beginning of range (0) below minimum (1): 0"
        );
        assert_eq!(
            refusal("0 0 * * 7"),
            "end of range (7) above maximum (6): 7"
        );
        assert_eq!(
            refusal("5-1 * * * *"),
            "beginning of range (5) beyond end of range (1): 5-1"
        );
        assert_eq!(
            refusal("*/0 * * * *"),
            "step of range should be a positive number: */0"
        );
        assert_eq!(
            refusal("*/-2 * * * *"),
            "negative number (-2) not allowed: -2"
        );
        assert_eq!(
            refusal("0 0 * foo *"),
            r#"failed to parse int from foo: strconv.Atoi: parsing "foo": invalid syntax"#
        );
        assert_eq!(refusal("1-2-3 * * * *"), "too many hyphens: 1-2-3");
        assert_eq!(refusal("1/2/3 * * * *"), "too many slashes: 1/2/3");
    }

    #[test]
    fn descriptors_and_durations_are_refused_as_go_parses_them() {
        assert_eq!(refusal("@often"), "unrecognized descriptor: @often");
        assert_eq!(refusal("@every"), "unrecognized descriptor: @every");
        assert_eq!(
            refusal("@every 1x"),
            r#"failed to parse duration @every 1x: time: unknown unit "x" in duration "1x""#
        );
        assert_eq!(
            refusal("@every 10"),
            r#"failed to parse duration @every 10: time: missing unit in duration "10""#
        );
        assert_eq!(
            refusal("@every h"),
            r#"failed to parse duration @every h: time: invalid duration "h""#
        );
    }

    #[test]
    fn a_zone_prefix_naming_an_unknown_zone_is_refused() {
        assert_eq!(
            refusal("TZ=Mars/Olympus 0 * * * *"),
            "provided bad location Mars/Olympus: unknown time zone Mars/Olympus"
        );
    }
}

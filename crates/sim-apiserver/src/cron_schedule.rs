//! A CronJob's `spec.schedule` as robfig/cron v3's `ParseStandard` reads it (five fields —
//! minute, hour, day of month, month, day of week — with names of months and days, or a `@`
//! descriptor, or `@every <duration>`, after an optional `TZ=`/`CRON_TZ=` zone prefix), for
//! both of its readers in Kubernetes 1.34: kube-apiserver refuses a schedule [`parse`]
//! refuses, with the parser's own words, which become the detail of the `spec.schedule`
//! field error; kube-controller-manager's CronJob controller runs the [`Schedule`] it
//! gives, whose [`Schedule::next`] is robfig/cron's `Next`.
//!
//! # Caveats
//! - A `TZ=` prefix with nothing after it (`TZ=UTC`) makes robfig/cron slice a string at -1:
//!   kube-apiserver 1.34 panics and drops the connection without an answer. Here the zone
//!   is the rest, and the schedule is refused for its zero fields.
//! - A schedule without a zone prefix is read in UTC: robfig/cron reads it in the process's
//!   local zone, which is UTC in the containers a control plane usually runs in.

use std::time::Duration;

use jiff::Timestamp;
use jiff::civil::DateTime;
use jiff::tz::TimeZone;

use super::time_zone;

/// Why `ParseStandard` refuses a schedule, worded as robfig/cron words it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// An empty schedule.
    #[error("empty spec string")]
    Empty,
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
    /// `all`: every value of the field, as `*`.
    fn all(&self) -> u64 {
        bits(self.min, self.max, 1) | STAR
    }

    /// A field of numbers only.
    const fn plain(min: u64, max: u64) -> Self {
        Self {
            min,
            max,
            names: &[],
        }
    }
}

/// robfig/cron's `starBit`: the field was `*` or `?` (with no step above one).
const STAR: u64 = 1 << 63;

/// A schedule as `cron.ParseStandard` parses it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Schedule {
    /// Five fields (a descriptor too), each a set of bits, read in a zone.
    Fields {
        /// Minutes 0-59.
        minute: u64,
        /// Hours 0-23.
        hour: u64,
        /// Days of the month 1-31, with [`STAR`] when the field was `*` or `?`.
        day_of_month: u64,
        /// Months 1-12.
        month: u64,
        /// Days of the week 0-6 (Sunday 0), with [`STAR`] when the field was `*` or `?`.
        day_of_week: u64,
        /// The zone the fields are read in.
        zone: TimeZone,
    },
    /// `@every <duration>`: at a constant delay of whole seconds, at least one.
    Every(Duration),
}

/// Checks `schedule` as `cron.ParseStandard` parses it.
///
/// # Errors
/// As [`parse`].
pub fn check(schedule: &str) -> Result<(), Error> {
    parse(schedule).map(|_| ())
}

/// Parses `schedule` as `cron.ParseStandard` does, in the zone of its `TZ=`/`CRON_TZ=`
/// prefix (UTC without one).
///
/// # Errors
/// The first thing the parser refuses, in its order: an empty schedule, the zone prefix,
/// the descriptor or the count of fields, then the fields from minute to day of week.
pub fn parse(schedule: &str) -> Result<Schedule, Error> {
    if schedule.is_empty() {
        return Err(Error::Empty);
    }
    let mut spec = schedule;
    let mut zone = TimeZone::UTC;
    if spec.starts_with("TZ=") || spec.starts_with("CRON_TZ=") {
        let equals = spec.find('=').unwrap_or_default();
        let space = spec.find(' ').unwrap_or(spec.len());
        let name = &spec[equals + 1..space];
        zone = time_zone::load(name).map_err(|error| Error::Location {
            zone: name.to_string(),
            error,
        })?;
        spec = spec[space..].trim();
    }
    if spec.starts_with('@') {
        return parse_descriptor(spec, zone);
    }
    let fields: Vec<&str> = spec.split_whitespace().collect();
    if fields.len() != 5 {
        return Err(Error::FieldCount(
            fields.into_iter().map(str::to_string).collect(),
        ));
    }
    Ok(Schedule::Fields {
        minute: field_bits(fields[0], &MINUTES)?,
        hour: field_bits(fields[1], &HOURS)?,
        day_of_month: field_bits(fields[2], &DAYS_OF_MONTH)?,
        month: field_bits(fields[3], &MONTHS)?,
        day_of_week: field_bits(fields[4], &DAYS_OF_WEEK)?,
        zone,
    })
}

/// `parseDescriptor`: the `@` words, as the fields they stand for, or `@every`.
fn parse_descriptor(descriptor: &str, zone: TimeZone) -> Result<Schedule, Error> {
    const EVERY: &str = "@every ";
    let fields = |minute, hour, day_of_month, month, day_of_week| {
        Ok(Schedule::Fields {
            minute,
            hour,
            day_of_month,
            month,
            day_of_week,
            zone: zone.clone(),
        })
    };
    let first = |bounds: &Bounds| 1 << bounds.min;
    match descriptor {
        "@yearly" | "@annually" => fields(
            first(&MINUTES),
            first(&HOURS),
            first(&DAYS_OF_MONTH),
            first(&MONTHS),
            DAYS_OF_WEEK.all(),
        ),
        "@monthly" => fields(
            first(&MINUTES),
            first(&HOURS),
            first(&DAYS_OF_MONTH),
            MONTHS.all(),
            DAYS_OF_WEEK.all(),
        ),
        "@weekly" => fields(
            first(&MINUTES),
            first(&HOURS),
            DAYS_OF_MONTH.all(),
            MONTHS.all(),
            first(&DAYS_OF_WEEK),
        ),
        "@daily" | "@midnight" => fields(
            first(&MINUTES),
            first(&HOURS),
            DAYS_OF_MONTH.all(),
            MONTHS.all(),
            DAYS_OF_WEEK.all(),
        ),
        "@hourly" => fields(
            first(&MINUTES),
            HOURS.all(),
            DAYS_OF_MONTH.all(),
            MONTHS.all(),
            DAYS_OF_WEEK.all(),
        ),
        _ => match descriptor.strip_prefix(EVERY) {
            Some(duration) => {
                let nanos = go_duration(duration).map_err(|reason| Error::Duration {
                    descriptor: descriptor.to_string(),
                    reason,
                })?;
                // `Every`: at least a second, and whole seconds.
                let seconds = (nanos / 1e9).floor().max(1.0);
                Ok(Schedule::Every(Duration::from_secs_f64(seconds)))
            }
            None => Err(Error::Descriptor(descriptor.to_string())),
        },
    }
}

/// `getField`: the ranges between commas (empty ones skipped), their bits together.
fn field_bits(field: &str, bounds: &Bounds) -> Result<u64, Error> {
    field
        .split(',')
        .filter(|r| !r.is_empty())
        .try_fold(0, |bits, range| Ok(bits | range_bits(range, bounds)?))
}

/// `getRange`: `*`, `?`, a value or `a-b`, each with an optional `/step`.
fn range_bits(range: &str, bounds: &Bounds) -> Result<u64, Error> {
    let range_and_step: Vec<&str> = range.split('/').collect();
    let low_and_high: Vec<&str> = range_and_step[0].split('-').collect();
    let mut star = 0;
    let (start, mut end) = if low_and_high[0] == "*" || low_and_high[0] == "?" {
        star = STAR;
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
            let step = non_negative_int(range_and_step[1])?;
            if step > 1 {
                star = 0;
            }
            step
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
    Ok(bits(start, end, step) | star)
}

/// `getBits`: every `step`th value from `start` to `end`.
fn bits(start: u64, end: u64, step: u64) -> u64 {
    (start..=end)
        .step_by(usize::try_from(step).unwrap_or(usize::MAX))
        .fold(0, |bits, value| bits | (1 << value))
}

impl Schedule {
    /// The first time of the schedule strictly after `after`: robfig/cron's `Next`, in the
    /// schedule's zone, with its arithmetic across daylight-saving changes (a time the
    /// clocks skip is not run that day, a time they repeat runs twice); `None` when there
    /// is none in the next five years.
    pub fn next(&self, after: &Timestamp) -> Option<Timestamp> {
        let zone = match self {
            Schedule::Every(delay) => {
                let secs = i64::try_from(delay.as_secs()).unwrap_or(i64::MAX);
                return Timestamp::from_second(after.as_second().saturating_add(secs)).ok();
            }
            Schedule::Fields { zone, .. } => zone,
        };
        // Schedules have no seconds: start at the next whole minute, which robfig reaches
        // through its seconds loop.
        let mut t = after.as_second().div_euclid(60) * 60 + 60;
        let wall =
            |t: i64| zone.to_datetime(Timestamp::from_second(t).unwrap_or(Timestamp::UNIX_EPOCH));
        let date = |y: i16, m: i8, d: i32, h: i64, mi: i64| {
            time_zone::go_date(zone, y, m, d, h, mi).map(|t| t.as_second())
        };
        let year_limit = wall(t).year() + 5;
        // Once a field has moved the time, the lower fields start from zero.
        let mut added = false;
        'wrap: loop {
            if wall(t).year() > year_limit {
                return None;
            }
            while !self.month_matches(wall(t).month()) {
                let w = wall(t);
                if !added {
                    added = true;
                    t = date(w.year(), w.month(), 1, 0, 0)?;
                }
                let w = wall(t);
                t = date(
                    w.year(),
                    w.month() + 1,
                    i32::from(w.day()),
                    i64::from(w.hour()),
                    i64::from(w.minute()),
                )?;
                if wall(t).month() == 1 {
                    continue 'wrap;
                }
            }
            while !self.day_matches(wall(t)) {
                let w = wall(t);
                if !added {
                    added = true;
                    t = date(w.year(), w.month(), i32::from(w.day()), 0, 0)?;
                }
                let w = wall(t);
                t = date(
                    w.year(),
                    w.month(),
                    i32::from(w.day()) + 1,
                    i64::from(w.hour()),
                    i64::from(w.minute()),
                )?;
                // A day that did not start at midnight (a daylight-saving change).
                let hour = i64::from(wall(t).hour());
                if hour > 12 {
                    t += (24 - hour) * 3600;
                } else {
                    t -= hour * 3600;
                }
                if wall(t).day() == 1 {
                    continue 'wrap;
                }
            }
            while !self.hour_matches(wall(t).hour()) {
                let w = wall(t);
                if !added {
                    added = true;
                    t = date(
                        w.year(),
                        w.month(),
                        i32::from(w.day()),
                        i64::from(w.hour()),
                        0,
                    )?;
                }
                t += 3600;
                if wall(t).hour() == 0 {
                    continue 'wrap;
                }
            }
            while !self.minute_matches(wall(t).minute()) {
                added = true;
                t += 60;
                if wall(t).minute() == 0 {
                    continue 'wrap;
                }
            }
            return Timestamp::from_second(t).ok();
        }
    }

    fn month_matches(&self, month: i8) -> bool {
        matches!(self, Schedule::Fields { month: set, .. } if set & (1 << month) != 0)
    }

    fn hour_matches(&self, hour: i8) -> bool {
        matches!(self, Schedule::Fields { hour: set, .. } if set & (1 << hour) != 0)
    }

    fn minute_matches(&self, minute: i8) -> bool {
        matches!(self, Schedule::Fields { minute: set, .. } if set & (1 << minute) != 0)
    }

    /// `dayMatches`: both day fields must match when either was `*`, else either.
    fn day_matches(&self, wall: DateTime) -> bool {
        let Schedule::Fields {
            day_of_month,
            day_of_week,
            ..
        } = self
        else {
            return false;
        };
        let day_of_month_matches = day_of_month & (1 << wall.day()) != 0;
        let day_of_week_matches = day_of_week & (1 << wall.weekday().to_sunday_zero_offset()) != 0;
        if (day_of_month | day_of_week) & STAR != 0 {
            day_of_month_matches && day_of_week_matches
        } else {
            day_of_month_matches || day_of_week_matches
        }
    }
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
/// each followed by a unit; `0` alone needs none. The duration in nanoseconds, negative
/// with a `-`.
fn go_duration(text: &str) -> Result<f64, String> {
    let invalid = || format!("time: invalid duration {}", go_quote(text));
    let mut rest = text.strip_prefix(['+', '-']).unwrap_or(text);
    let sign = if text.starts_with('-') { -1.0 } else { 1.0 };
    if rest == "0" {
        return Ok(0.0);
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
    Ok(sign * total)
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

    fn next(schedule: &str, after: &str) -> String {
        parse(schedule)
            .unwrap()
            .next(&after.parse().unwrap())
            .unwrap()
            .to_string()
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
    fn the_next_time_follows_each_field_of_the_schedule() {
        assert_eq!(
            next("*/5 * * * *", "2026-01-01T00:03:10Z"),
            "2026-01-01T00:05:00Z"
        );
        assert_eq!(
            next("*/5 * * * *", "2026-01-01T00:05:00Z"),
            "2026-01-01T00:10:00Z"
        );
        assert_eq!(
            next("30 2 * * *", "2026-01-01T03:00:00Z"),
            "2026-01-02T02:30:00Z"
        );
        assert_eq!(
            next("0 0 29 2 *", "2026-03-01T00:00:00Z"),
            "2028-02-29T00:00:00Z"
        );
        // 2026-01-01 is a Thursday: the next Monday is the 5th.
        assert_eq!(
            next("0 9 * * MON", "2026-01-01T00:00:00Z"),
            "2026-01-05T09:00:00Z"
        );
        assert_eq!(
            next("@monthly", "2026-01-15T00:00:00Z"),
            "2026-02-01T00:00:00Z"
        );
        assert_eq!(
            next("@every 90s", "2026-01-01T00:00:00Z"),
            "2026-01-01T00:01:30Z"
        );
        assert_eq!(
            next("TZ=UTC 0 * * * *", "2026-01-01T00:00:00Z"),
            "2026-01-01T01:00:00Z"
        );
    }

    #[test]
    fn a_restricted_day_of_month_or_week_matches_either_as_cron_does() {
        // Both restricted: the 13th or any Friday. 2026-02-06 is a Friday.
        assert_eq!(
            next("0 0 13 * 5", "2026-02-01T00:00:00Z"),
            "2026-02-06T00:00:00Z"
        );
        // Day of week `*`: only the 13th.
        assert_eq!(
            next("0 0 13 * *", "2026-02-01T00:00:00Z"),
            "2026-02-13T00:00:00Z"
        );
    }

    #[test]
    fn a_schedule_in_a_zone_with_daylight_saving_follows_its_wall_clock_as_robfig_cron_does() {
        // New York, 2026: EST (-5) until 03-08 02:00, EDT (-4) until 11-01 02:00.
        assert_eq!(
            next("TZ=America/New_York 0 9 * * *", "2026-03-07T15:00:00Z"),
            "2026-03-08T13:00:00Z",
            "9:00 EDT the day the clocks go forward"
        );
        assert_eq!(
            next("TZ=America/New_York 0 9 * * *", "2026-03-07T00:00:00Z"),
            "2026-03-07T14:00:00Z",
            "9:00 EST the day before"
        );
        assert_eq!(
            next("TZ=America/New_York 30 2 * * *", "2026-03-07T08:00:00Z"),
            "2026-03-09T06:30:00Z",
            "02:30 does not exist on the 8th: the next is on the 9th"
        );
        assert_eq!(
            next("TZ=America/New_York 30 1 * * *", "2026-11-01T04:00:00Z"),
            "2026-11-01T05:30:00Z",
            "01:30 EDT"
        );
        assert_eq!(
            next("TZ=America/New_York 30 1 * * *", "2026-11-01T05:30:00Z"),
            "2026-11-01T06:30:00Z",
            "01:30 again, EST"
        );
        assert_eq!(
            next("TZ=Asia/Kolkata 0 0 1 * *", "2026-01-15T00:00:00Z"),
            "2026-01-31T18:30:00Z",
            "midnight of the first at +05:30"
        );
    }

    #[test]
    fn a_star_with_a_step_of_one_still_counts_as_a_star_for_the_days() {
        // `*/1` day of month keeps robfig's star bit: only Fridays, not every day.
        assert_eq!(
            next("0 0 */1 * 5", "2026-02-01T00:00:00Z"),
            "2026-02-06T00:00:00Z"
        );
        // `*/2` does not: odd days or Fridays. 2026-02-01 is a Sunday.
        assert_eq!(
            next("0 0 */2 * 5", "2026-02-01T00:00:00Z"),
            "2026-02-03T00:00:00Z"
        );
    }

    #[test]
    fn every_runs_at_whole_seconds_and_at_least_one() {
        assert_eq!(
            parse("@every 1.5s"),
            Ok(Schedule::Every(Duration::from_secs(1)))
        );
        assert_eq!(
            parse("@every 1h30m"),
            Ok(Schedule::Every(Duration::from_secs(5400)))
        );
        assert_eq!(
            parse("@every 0"),
            Ok(Schedule::Every(Duration::from_secs(1)))
        );
        assert_eq!(
            parse("@every -5m"),
            Ok(Schedule::Every(Duration::from_secs(1)))
        );
    }

    #[test]
    fn an_empty_schedule_is_refused_as_robfig_cron_words_it() {
        assert_eq!(refusal(""), "empty spec string");
    }

    #[test]
    fn a_zone_prefix_naming_an_unknown_zone_is_refused() {
        assert_eq!(
            refusal("TZ=Mars/Olympus 0 * * * *"),
            "provided bad location Mars/Olympus: unknown time zone Mars/Olympus"
        );
    }
}

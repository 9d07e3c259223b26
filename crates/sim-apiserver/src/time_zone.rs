//! Time zones as Go's `time.LoadLocation` finds them, for what kube-apiserver and
//! kube-controller-manager 1.34 do with a CronJob's `spec.timeZone` (and a schedule's `TZ=`):
//! kube-apiserver refuses a name it cannot load, and the CronJob controller computes the
//! schedule in the zone it loads. Like Go, the zones are the host's compiled zoneinfo files
//! (`$TZDIR`, else `/usr/share/zoneinfo`), read through jiff's zoneinfo database, and a name
//! is a file name: matched case-sensitively, as on the Linux filesystem Go opens it from.
//!
//! [`go_date`] resolves a wall-clock time in a zone as Go's `time.Date` does, which the
//! schedule arithmetic relies on around daylight-saving changes.

use jiff::Timestamp;
use jiff::civil::DateTime;
use jiff::tz::{Offset, TimeZone};

/// Why a zone name could not be loaded, worded as Go's `time.LoadLocation` words it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// No zoneinfo file of that name (`time: unknown time zone`, as Go says it).
    #[error("unknown time zone {0}")]
    Unknown(String),
    /// A name with `..` or a leading slash or backslash.
    #[error("time: invalid location name")]
    InvalidName,
}

/// The zone `name` names, as `time.LoadLocation(name)` loads it: `""` and `UTC` are UTC,
/// others are read from the zoneinfo database. `Local` is the host's zone, which the
/// simulator takes to be UTC, as a control plane in a container has it.
pub fn load(name: &str) -> Result<TimeZone, Error> {
    if name.is_empty() || name == "UTC" || name == "Local" {
        return Ok(TimeZone::UTC);
    }
    if name.contains("..") || name.starts_with('/') || name.starts_with('\\') {
        return Err(Error::InvalidName);
    }
    let unknown = || Error::Unknown(name.to_string());
    let zone = TimeZone::get(name).map_err(|_| unknown())?;
    // jiff finds names case-insensitively; Go opens a file, and Linux names are exact.
    if zone.iana_name() != Some(name) {
        return Err(unknown());
    }
    Ok(zone)
}

/// The instant of a wall-clock time in `zone`, resolved as Go's `time.Date` resolves it: the
/// fields may overflow (a 32nd day is the next month's first), a time repeated when the clocks
/// go back is the earlier, and a time skipped when they go forward is read with the offset
/// before the change (02:30 on a spring-forward night in New York is 01:30 EST).
pub fn go_date(
    zone: &TimeZone,
    year: i16,
    month: i8,
    day: i32,
    hour: i64,
    minute: i64,
) -> Option<Timestamp> {
    let first = DateTime::new(year, 1, 1, 0, 0, 0, 0).ok()?;
    let months = i64::from(month) - 1;
    let civil = first
        .checked_add(jiff::Span::new().months(months))
        .ok()?
        .checked_add(jiff::Span::new().days(i64::from(day) - 1))
        .ok()?;
    let as_utc = Offset::UTC.to_timestamp(civil).ok()?.as_second() + hour * 3600 + minute * 60;
    // Go guesses the offset at the wall-clock time read as UTC, then takes the offset in
    // force at the instant that guess gives (the guess itself when it still holds).
    let guess = zone.to_offset(Timestamp::from_second(as_utc).ok()?);
    let utc = as_utc - i64::from(guess.seconds());
    let offset = zone.to_offset(Timestamp::from_second(utc).ok()?);
    Timestamp::from_second(as_utc - i64::from(offset.seconds())).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    #[test]
    fn a_zone_of_the_host_database_loads_and_an_unknown_one_is_refused_as_go_words_it() {
        assert!(load("America/New_York").is_ok());
        assert_eq!(
            load("Mars/Olympus").unwrap_err().to_string(),
            "unknown time zone Mars/Olympus"
        );
        assert_eq!(
            load("america/new_york").unwrap_err().to_string(),
            "unknown time zone america/new_york"
        );
        assert_eq!(
            load("../etc/passwd").unwrap_err().to_string(),
            "time: invalid location name"
        );
        assert_eq!(load("UTC").unwrap(), TimeZone::UTC);
    }

    #[test]
    fn a_skipped_wall_clock_time_takes_the_offset_before_the_change_as_go_does() {
        let new_york = load("America/New_York").unwrap();
        // 2026-03-08: the clocks go from 02:00 EST to 03:00 EDT.
        assert_eq!(
            go_date(&new_york, 2026, 3, 8, 2, 30),
            Some(at("2026-03-08T06:30:00Z"))
        );
        // 2026-11-01: 01:30 happens twice; the first (EDT) is Go's.
        assert_eq!(
            go_date(&new_york, 2026, 11, 1, 1, 30),
            Some(at("2026-11-01T05:30:00Z"))
        );
        // Overflowing days roll into the next month.
        assert_eq!(
            go_date(&new_york, 2026, 1, 32, 0, 0),
            Some(at("2026-02-01T05:00:00Z"))
        );
    }
}

//! Kubernetes' semver library (k8s.io/apiserver/pkg/cel/library/semverlib.go):
//! `semver(string[, normalize])` and `isSemver`, a version's `major`, `minor` and `patch`,
//! `compareTo`, `isGreaterThan` and `isLessThan`, with blang/semver's parsing, precedence and
//! error wording (versions equal by precedence: build metadata aside).

use cel::common::types::{CelBool, CelInt, CelString};
use cel::{DeclarationError, Env, ExecutionError};

/// A prerelease identifier: a number or an alphanumeric string.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Prerelease {
    Number(u64),
    Text(String),
}

impl Prerelease {
    /// Numbers before strings, numbers by value, strings byte-wise.
    fn compare(&self, other: &Prerelease) -> std::cmp::Ordering {
        match (self, other) {
            (Prerelease::Number(a), Prerelease::Number(b)) => a.cmp(b),
            (Prerelease::Number(_), Prerelease::Text(_)) => std::cmp::Ordering::Less,
            (Prerelease::Text(_), Prerelease::Number(_)) => std::cmp::Ordering::Greater,
            (Prerelease::Text(a), Prerelease::Text(b)) => a.cmp(b),
        }
    }
}

/// A `kubernetes.Semver`.
#[derive(Debug, Clone)]
pub(super) struct Semver {
    major: u64,
    minor: u64,
    patch: u64,
    prerelease: Vec<Prerelease>,
}

impl PartialEq for Semver {
    fn eq(&self, other: &Self) -> bool {
        self.compare(other).is_eq()
    }
}

super::opaque_value!(Semver, "kubernetes.Semver");

fn only(text: &str, allowed: impl Fn(char) -> bool) -> bool {
    text.chars().all(allowed)
}

fn alphanumeric(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '-'
}

/// Go's `strconv.ParseUint(text, 10, 64)`, worded as Go words its errors.
fn parse_number(text: &str) -> Result<u64, String> {
    if text.is_empty() {
        return Err(format!(
            "strconv.ParseUint: parsing {}: invalid syntax",
            super::go_quote(text)
        ));
    }
    text.parse().map_err(|_| {
        format!(
            "strconv.ParseUint: parsing {}: value out of range",
            super::go_quote(text)
        )
    })
}

/// A numbered part (`major`, `minor` or `patch`) of a version.
fn part(text: &str, name: &str) -> Result<u64, String> {
    if !only(text, |c| c.is_ascii_digit()) {
        return Err(format!(
            "Invalid character(s) found in {name} number {}",
            super::go_quote(text)
        ));
    }
    if text.len() > 1 && text.starts_with('0') {
        let capitalized = format!("{}{}", name[..1].to_uppercase(), &name[1..]);
        return Err(format!(
            "{capitalized} number must not contain leading zeroes {}",
            super::go_quote(text)
        ));
    }
    parse_number(text)
}

/// A version as blang/semver's `Parse` reads it.
///
/// # Errors
/// blang/semver's wording.
fn parse(text: &str) -> Result<Semver, String> {
    if text.is_empty() {
        return Err("Version string empty".into());
    }
    let parts: Vec<&str> = text.splitn(3, '.').collect();
    let [major, minor, rest] = parts[..] else {
        return Err("No Major.Minor.Patch elements found".into());
    };
    let major = part(major, "major")?;
    let minor = part(minor, "minor")?;
    let (rest, build) = match rest.split_once('+') {
        Some((rest, build)) => (rest, Some(build)),
        None => (rest, None),
    };
    let (patch, prerelease) = match rest.split_once('-') {
        Some((patch, prerelease)) => (patch, Some(prerelease)),
        None => (rest, None),
    };
    let patch = part(patch, "patch")?;
    let mut identifiers = Vec::new();
    for identifier in prerelease
        .map(|p| p.split('.').collect::<Vec<_>>())
        .unwrap_or_default()
    {
        if identifier.is_empty() {
            return Err("Prerelease is empty".into());
        }
        if only(identifier, |c| c.is_ascii_digit()) {
            if identifier.len() > 1 && identifier.starts_with('0') {
                return Err(format!(
                    "Numeric PreRelease version must not contain leading zeroes {}",
                    super::go_quote(identifier)
                ));
            }
            identifiers.push(Prerelease::Number(parse_number(identifier)?));
        } else if only(identifier, alphanumeric) {
            identifiers.push(Prerelease::Text(identifier.to_string()));
        } else {
            return Err(format!(
                "Invalid character(s) found in prerelease {}",
                super::go_quote(identifier)
            ));
        }
    }
    for metadata in build
        .map(|b| b.split('.').collect::<Vec<_>>())
        .unwrap_or_default()
    {
        if metadata.is_empty() {
            return Err("Build meta data is empty".into());
        }
        if !only(metadata, alphanumeric) {
            return Err(format!(
                "Invalid character(s) found in build meta data {}",
                super::go_quote(metadata)
            ));
        }
    }
    Ok(Semver {
        major,
        minor,
        patch,
        prerelease: identifiers,
    })
}

/// The library's normalizeAndParse: a leading `v` dropped, leading zeroes trimmed, missing
/// minor and patch numbers made 0.
fn normalize_and_parse(text: &str) -> Result<Semver, String> {
    let text = text.strip_prefix('v').unwrap_or(text);
    let mut parts: Vec<String> = text
        .splitn(3, '.')
        .map(|part| {
            if part.len() <= 1 {
                return part.to_string();
            }
            let trimmed = part.trim_start_matches('0');
            if trimmed.is_empty() || !trimmed.starts_with(|c: char| c.is_ascii_digit()) {
                format!("0{trimmed}")
            } else {
                trimmed.to_string()
            }
        })
        .collect();
    if parts.len() < 3 {
        if parts.last().is_some_and(|last| last.contains(['+', '-'])) {
            return Err("short version cannot contain PreRelease/Build meta data".into());
        }
        parts.resize(3, "0".into());
    }
    parse(&parts.join("."))
}

impl Semver {
    /// Precedence: the numbers, then a release above its prereleases, then the identifiers.
    fn compare(&self, other: &Semver) -> std::cmp::Ordering {
        use std::cmp::Ordering;
        let numbers =
            (self.major, self.minor, self.patch).cmp(&(other.major, other.minor, other.patch));
        if numbers != Ordering::Equal {
            return numbers;
        }
        match (self.prerelease.is_empty(), other.prerelease.is_empty()) {
            (true, true) => return Ordering::Equal,
            (true, false) => return Ordering::Greater,
            (false, true) => return Ordering::Less,
            (false, false) => {}
        }
        for (a, b) in self.prerelease.iter().zip(&other.prerelease) {
            let order = a.compare(b);
            if order != Ordering::Equal {
                return order;
            }
        }
        self.prerelease.len().cmp(&other.prerelease.len())
    }
}

fn semver(text: &CelString<'_>) -> Result<Semver, ExecutionError> {
    parse(text.inner()).map_err(|e| ExecutionError::function_error("semver", e))
}

fn semver_normalized(text: &CelString<'_>, normalize: &CelBool) -> Result<Semver, ExecutionError> {
    let parsed = if *normalize.inner() {
        normalize_and_parse(text.inner())
    } else {
        parse(text.inner())
    };
    parsed.map_err(|e| ExecutionError::function_error("semver", e))
}

fn is_semver(text: &CelString<'_>) -> CelBool {
    parse(text.inner()).is_ok().into()
}

fn is_semver_normalized(text: &CelString<'_>, normalize: &CelBool) -> CelBool {
    semver_normalized(text, normalize).is_ok().into()
}

/// blang/semver's uint64 as CEL's int, as Go converts it.
fn int(value: u64) -> CelInt {
    (value as i64).into()
}

fn major(version: &Semver) -> CelInt {
    int(version.major)
}

fn minor(version: &Semver) -> CelInt {
    int(version.minor)
}

fn patch(version: &Semver) -> CelInt {
    int(version.patch)
}

fn compare_to(version: &Semver, other: &Semver) -> CelInt {
    (version.compare(other) as i64).into()
}

fn is_greater_than(version: &Semver, other: &Semver) -> CelBool {
    version.compare(other).is_gt().into()
}

fn is_less_than(version: &Semver, other: &Semver) -> CelBool {
    version.compare(other).is_lt().into()
}

/// Registers the library's overloads.
pub(super) fn extension(env: &mut Env) -> Result<(), DeclarationError> {
    cel::add_overload!(env, fn semver: (CelString) -> Result<Semver>, id = "string_to_semver")?;
    cel::add_overload!(env, fn semver_normalized: (CelString, CelBool) -> Result<Semver>, name = "semver", id = "string_bool_to_semver")?;
    cel::add_overload!(env, fn is_semver: (CelString) -> CelBool, id = "is_semver_string")?;
    cel::add_overload!(env, fn is_semver_normalized: (CelString, CelBool) -> CelBool, name = "isSemver", id = "is_semver_string_bool")?;
    cel::add_member_overload!(env, fn major: (Semver) -> CelInt, id = "semver_major")?;
    cel::add_member_overload!(env, fn minor: (Semver) -> CelInt, id = "semver_minor")?;
    cel::add_member_overload!(env, fn patch: (Semver) -> CelInt, id = "semver_patch")?;
    cel::add_member_overload!(env, fn compare_to: (Semver, Semver) -> CelInt, id = "semver_compare_to")?;
    cel::add_member_overload!(env, fn is_greater_than: (Semver, Semver) -> CelBool, id = "semver_is_greater_than")?;
    cel::add_member_overload!(env, fn is_less_than: (Semver, Semver) -> CelBool, id = "semver_is_less_than")?;
    Ok(())
}

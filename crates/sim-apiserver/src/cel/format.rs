//! Kubernetes' format library (k8s.io/apiserver/pkg/cel/library/format.go): the named
//! formats `format.dns1123Label()`, `format.dns1123Subdomain()`, `format.dns1035Label()`,
//! `format.qualifiedName()`, their `…Prefix()` variants, `format.labelValue()`,
//! `format.uri()`, `format.uuid()`, `format.byte()`, `format.date()` and `format.datetime()`,
//! `format.named(name)` (an optional format), and a format's `validate(string)`: an optional
//! list of the validator's messages, none when the string is valid.

use std::sync::LazyLock;

use cel::common::types::{CelList, CelOptional, CelString};
use cel::common::value::Val;
use cel::{DeclarationError, Env};

use super::super::names;

/// A `kubernetes.NamedFormat`: one of the library's constant formats, equal by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Format {
    name: &'static str,
}

super::opaque_value!(Format, "kubernetes.NamedFormat");

/// apimachinery's maskTrailingDash: a prefix may end in a dash, which is replaced, with the
/// character before it (sic), by an `a`.
fn mask_trailing_dash(name: &str) -> String {
    if name.len() > 1 && name.ends_with('-') {
        let kept = name.char_indices().rev().nth(1).map_or(0, |(at, _)| at);
        format!("{}a", &name[..kept])
    } else {
        name.to_string()
    }
}

/// `IsDNS1123Label`: a value that is no label but has a subdomain's shape is told it must
/// not contain dots.
fn dns1123_label(text: &str) -> Vec<String> {
    let too_long = |m: &String| m.starts_with("must be no more than");
    let subdomain_shaped = names::dns1123_subdomain(text).iter().all(too_long);
    names::dns1123_label(text)
        .into_iter()
        .map(|m| {
            if subdomain_shaped && !too_long(&m) {
                "must not contain dots".to_string()
            } else {
                m
            }
        })
        .collect()
}

static UUID: LazyLock<regex::Regex> = LazyLock::new(|| {
    regex::Regex::new("(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$")
        .expect("the UUID pattern compiles")
});

static BASE64: LazyLock<regex::Regex> = LazyLock::new(|| {
    regex::Regex::new(
        "^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=|[A-Za-z0-9+/]{4})$",
    )
    .expect("the base64 pattern compiles")
});

static TIME_OF_DAY: LazyLock<regex::Regex> = LazyLock::new(|| {
    regex::Regex::new("^([0-9]{2}):([0-9]{2}):([0-9]{2})(.[0-9]+)?(z|([+-][0-9]{2}:[0-9]{2}))$")
        .expect("the time pattern compiles")
});

/// strfmt's IsDate: Go's `time.Parse("2006-01-02", …)`.
fn is_date(text: &str) -> bool {
    let bytes = text.as_bytes();
    if bytes.len() != 10 || bytes[4] != b'-' || bytes[7] != b'-' {
        return false;
    }
    let number = |range: std::ops::Range<usize>| -> Option<u32> {
        let part = &text[range];
        part.bytes()
            .all(|b| b.is_ascii_digit())
            .then(|| part.parse().ok())
            .flatten()
    };
    let (Some(year), Some(month), Some(day)) = (number(0..4), number(5..7), number(8..10)) else {
        return false;
    };
    chrono::NaiveDate::from_ymd_opt(year as i32, month, day).is_some()
}

/// strfmt's IsDateTime: a date, a `t` and a time of day the pattern finds, its fields in
/// range (compared as strings, as strfmt compares them).
fn is_date_time(text: &str) -> bool {
    if text.len() < 4 {
        return false;
    }
    let lower = text.to_lowercase();
    let parts: Vec<&str> = lower.split('t').collect();
    if parts.len() < 2 || !is_date(parts[0]) {
        return false;
    }
    let Some(found) = TIME_OF_DAY.captures(parts[1]) else {
        return false;
    };
    let field = |i: usize| found.get(i).map_or("", |m| m.as_str());
    field(1) <= "23" && field(2) <= "59" && field(3) <= "59"
}

impl Format {
    /// The validator's messages for `text` (none: valid).
    fn validate(&self, text: &str) -> Vec<String> {
        let message = |valid: bool, message: &str| {
            if valid {
                Vec::new()
            } else {
                vec![message.to_string()]
            }
        };
        match self.name {
            "dns1123Label" => dns1123_label(text),
            "dns1123Subdomain" => names::dns1123_subdomain(text),
            "dns1035Label" => names::dns1035_label(text),
            "qualifiedName" => names::label_key(text),
            "dns1123LabelPrefix" => dns1123_label(&mask_trailing_dash(text)),
            "dns1123SubdomainPrefix" => names::dns1123_subdomain(&mask_trailing_dash(text)),
            "dns1035LabelPrefix" => names::dns1035_label(&mask_trailing_dash(text)),
            "labelValue" => names::label_value(text),
            "uri" => super::url::request_uri_error(text).into_iter().collect(),
            "uuid" => message(UUID.is_match(text), "does not match the UUID format"),
            "byte" => message(BASE64.is_match(text), "invalid base64"),
            "date" => message(is_date(text), "invalid date"),
            "datetime" => message(is_date_time(text), "invalid datetime"),
            _ => Vec::new(),
        }
    }
}

fn named(name: &CelString<'_>) -> CelOptional<'static> {
    match FORMATS.iter().find(|f| **f == name.inner()) {
        Some(name) => CelOptional::of(Box::new(Format { name })),
        None => CelOptional::none(),
    }
}

fn validate(format: &Format, text: &CelString<'_>) -> CelOptional<'static> {
    let messages = format.validate(text.inner());
    if messages.is_empty() {
        return CelOptional::none();
    }
    let list: Vec<Box<dyn Val>> = messages
        .into_iter()
        .map(|m| Box::new(CelString::from(m)) as Box<dyn Val>)
        .collect();
    CelOptional::of(Box::new(CelList::from(list)))
}

/// The library's formats: `FORMATS`, their names as `format.named` and `format.<name>()`
/// know them, and `add_constants`, which registers `format.<name>()` for each.
macro_rules! formats {
    ($($name:literal),* $(,)?) => {
        const FORMATS: &[&str] = &[$($name),*];

        fn add_constants(env: &mut Env) -> Result<(), DeclarationError> {
            $({
                fn constant() -> Format {
                    Format { name: $name }
                }
                cel::add_overload!(env, fn constant: () -> Format,
                    name = concat!("format.", $name), id = concat!("format.", $name))?;
            })*
            Ok(())
        }
    };
}

formats!(
    "dns1123Label",
    "dns1123Subdomain",
    "dns1035Label",
    "qualifiedName",
    "dns1123LabelPrefix",
    "dns1123SubdomainPrefix",
    "dns1035LabelPrefix",
    "labelValue",
    "uri",
    "uuid",
    "byte",
    "date",
    "datetime",
);

/// Registers the library's overloads.
pub(super) fn extension(env: &mut Env) -> Result<(), DeclarationError> {
    cel::add_overload!(env, fn named: (CelString) -> CelOptional, name = "format.named", id = "format-named")?;
    cel::add_member_overload!(env, fn validate: (Format, CelString) -> CelOptional, id = "format-validate")?;
    add_constants(env)
}

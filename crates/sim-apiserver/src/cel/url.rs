//! Kubernetes' URL library (k8s.io/apiserver/pkg/cel/library/urls.go): `url(string)` and
//! `isURL`, a URL's `getScheme`, `getHost`, `getHostname`, `getPort`, `getEscapedPath` and
//! `getQuery`, with Go's `net/url` (`ParseRequestURI`, then `Parse`) deciding what a URL is,
//! how its parts read and how its refusal is worded.

use std::collections::HashMap;

use cel::common::types::{CelBool, CelList, CelMap, CelMapKey, CelString};
use cel::common::value::Val;
use cel::{DeclarationError, Env, ExecutionError};

/// The parts of a URL Go's `url.URL` keeps that the library reads.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(super) struct Url {
    scheme: String,
    opaque: String,
    /// The userinfo as written (its presence changes how the URL is written back).
    user: Option<String>,
    host: String,
    path: String,
    raw_path: String,
    raw_query: String,
    force_query: bool,
    fragment: String,
}

super::opaque_value!(Url, "kubernetes.URL");

/// The escaping contexts of `net/url`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Path,
    Host,
    Zone,
    UserPassword,
    QueryComponent,
    Fragment,
}

/// Go's `shouldEscape`.
fn should_escape(c: u8, mode: Mode) -> bool {
    if c.is_ascii_alphanumeric() {
        return false;
    }
    if matches!(mode, Mode::Host | Mode::Zone) && b"!$&'()*+,;=:[]<>\"".contains(&c) {
        return false;
    }
    match c {
        b'-' | b'_' | b'.' | b'~' => return false,
        b'$' | b'&' | b'+' | b',' | b'/' | b':' | b';' | b'=' | b'?' | b'@' => match mode {
            Mode::Path => return c == b'?',
            Mode::UserPassword => return matches!(c, b'@' | b'/' | b'?' | b':'),
            Mode::QueryComponent => return true,
            Mode::Fragment => return false,
            Mode::Host | Mode::Zone => {}
        },
        _ => {}
    }
    if mode == Mode::Fragment && matches!(c, b'!' | b'(' | b')' | b'*') {
        return false;
    }
    true
}

fn hex_value(c: u8) -> Option<u8> {
    (c as char).to_digit(16).map(|d| d as u8)
}

/// Go's `unescape`, worded as its errors are.
fn unescape(text: &str, mode: Mode) -> Result<String, String> {
    let bytes = text.as_bytes();
    let escape_error = |s: &str| format!("invalid URL escape {}", super::go_quote(s));
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                if i + 2 >= bytes.len()
                    || hex_value(bytes[i + 1]).is_none()
                    || hex_value(bytes[i + 2]).is_none()
                {
                    let end = (i + 3).min(bytes.len());
                    return Err(escape_error(&String::from_utf8_lossy(&bytes[i..end])));
                }
                let escape = &text[i..i + 3];
                let high = hex_value(bytes[i + 1]).unwrap_or_default();
                let value = high << 4 | hex_value(bytes[i + 2]).unwrap_or_default();
                if mode == Mode::Host && high < 8 && escape != "%25" {
                    return Err(escape_error(escape));
                }
                if mode == Mode::Zone
                    && escape != "%25"
                    && value != b' '
                    && should_escape(value, Mode::Host)
                {
                    return Err(escape_error(escape));
                }
                i += 3;
            }
            c => {
                if matches!(mode, Mode::Host | Mode::Zone) && c < 0x80 && should_escape(c, mode) {
                    return Err(format!(
                        "invalid character {} in host name",
                        super::go_quote(&(c as char).to_string())
                    ));
                }
                i += 1;
            }
        }
    }
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let high = hex_value(bytes[i + 1]).unwrap_or_default();
                out.push(high << 4 | hex_value(bytes[i + 2]).unwrap_or_default());
                i += 3;
            }
            b'+' if mode == Mode::QueryComponent => {
                out.push(b' ');
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    Ok(String::from_utf8_lossy(&out).into_owned())
}

/// Go's `escape`.
fn escape(text: &str, mode: Mode) -> String {
    let mut out = String::with_capacity(text.len());
    for &c in text.as_bytes() {
        if c == b' ' && mode == Mode::QueryComponent {
            out.push('+');
        } else if should_escape(c, mode) {
            out.push_str(&format!("%{c:02X}"));
        } else {
            out.push(c as char);
        }
    }
    out
}

/// Go's `validOptionalPort`: empty, or a colon and digits.
fn valid_optional_port(port: &str) -> bool {
    port.is_empty()
        || port
            .strip_prefix(':')
            .is_some_and(|digits| digits.bytes().all(|b| b.is_ascii_digit()))
}

/// Go's `getScheme`.
fn split_scheme(raw: &str) -> Result<(&str, &str), String> {
    for (i, c) in raw.bytes().enumerate() {
        match c {
            b'a'..=b'z' | b'A'..=b'Z' => {}
            b'0'..=b'9' | b'+' | b'-' | b'.' if i > 0 => {}
            b':' if i == 0 => return Err("missing protocol scheme".into()),
            b':' => return Ok((&raw[..i], &raw[i + 1..])),
            _ => return Ok(("", raw)),
        }
    }
    Ok(("", raw))
}

/// Go's `parseHost` (Go 1.26: an IP literal checked with `netip`).
fn parse_host(scheme: &str, host: &str) -> Result<String, String> {
    if let Some(open) = host.rfind('[') {
        if open > 0 {
            return Err("invalid IP-literal".into());
        }
        let Some(close) = host.rfind(']') else {
            return Err("missing ']' in host".into());
        };
        let colon_port = &host[close + 1..];
        if !valid_optional_port(colon_port) {
            return Err(format!(
                "invalid port {} after host",
                super::go_quote(colon_port)
            ));
        }
        let colon_port = unescape(colon_port, Mode::Host)?;
        let hostname = &host[1..close];
        let unescaped = match hostname.find("%25") {
            Some(zone) => {
                unescape(&hostname[..zone], Mode::Host)? + &unescape(&hostname[zone..], Mode::Zone)?
            }
            None => unescape(hostname, Mode::Host)?,
        };
        let (address, _) = super::ip::parse_prefix_address(&unescaped)
            .map_err(|e| format!("invalid host: {e}"))?;
        if address.is_ipv4() {
            return Err("invalid IP-literal".into());
        }
        return Ok(format!("[{unescaped}]{colon_port}"));
    }
    if let Some(first) = host.find(':') {
        let last = host.rfind(':').unwrap_or(first);
        // http and https keep the first colon (Go's urlstrictcolons default), others the last.
        let at = if last != first && !matches!(scheme, "http" | "https") {
            last
        } else {
            first
        };
        let colon_port = &host[at..];
        if !valid_optional_port(colon_port) {
            return Err(format!(
                "invalid port {} after host",
                super::go_quote(colon_port)
            ));
        }
    }
    unescape(host, Mode::Host)
}

/// Go's `validUserinfo`.
fn valid_userinfo(userinfo: &str) -> bool {
    userinfo
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "-._:~!$&'()*+,;=%@".contains(c))
}

/// Go's `parseAuthority`: the userinfo (unescaped, checked) and the host.
fn parse_authority(scheme: &str, authority: &str) -> Result<(Option<String>, String), String> {
    let at = authority.rfind('@');
    let host = parse_host(scheme, &authority[at.map_or(0, |i| i + 1)..])?;
    let Some(at) = at else {
        return Ok((None, host));
    };
    let userinfo = &authority[..at];
    if !valid_userinfo(userinfo) {
        return Err("net/url: invalid userinfo".into());
    }
    match userinfo.split_once(':') {
        None => unescape(userinfo, Mode::UserPassword)?,
        Some((name, password)) => {
            unescape(name, Mode::UserPassword)?;
            unescape(password, Mode::UserPassword)?
        }
    };
    Ok((Some(userinfo.to_string()), host))
}

/// Go's `parse`.
fn parse_inner(raw: &str, via_request: bool) -> Result<Url, String> {
    if raw.bytes().any(|b| b < b' ' || b == 0x7f) {
        return Err("net/url: invalid control character in URL".into());
    }
    if raw.is_empty() && via_request {
        return Err("empty url".into());
    }
    let mut url = Url::default();
    if raw == "*" {
        url.path = "*".into();
        return Ok(url);
    }
    let (scheme, mut rest) = split_scheme(raw)?;
    url.scheme = scheme.to_lowercase();
    if rest.ends_with('?') && rest.matches('?').count() == 1 {
        url.force_query = true;
        rest = &rest[..rest.len() - 1];
    } else if let Some((before, query)) = rest.split_once('?') {
        url.raw_query = query.to_string();
        rest = before;
    }
    if !rest.starts_with('/') {
        if !url.scheme.is_empty() {
            url.opaque = rest.to_string();
            return Ok(url);
        }
        if via_request {
            return Err("invalid URI for request".into());
        }
        if rest.split('/').next().unwrap_or_default().contains(':') {
            return Err("first path segment in URL cannot contain colon".into());
        }
    }
    if (!url.scheme.is_empty() || !via_request && !rest.starts_with("///"))
        && rest.starts_with("//")
    {
        let authority_and_path = &rest[2..];
        let (authority, path) = match authority_and_path.find('/') {
            Some(i) => (&authority_and_path[..i], &authority_and_path[i..]),
            None => (authority_and_path, ""),
        };
        let (user, host) = parse_authority(&url.scheme, authority)?;
        url.user = user;
        url.host = host;
        rest = path;
    }
    url.path = unescape(rest, Mode::Path)?;
    if escape(&url.path, Mode::Path) != rest {
        url.raw_path = rest.to_string();
    }
    Ok(url)
}

/// Go's error of a failed parse: `parse "<raw>": <reason>`.
fn parse_error(raw: &str, reason: &str) -> String {
    format!("parse {}: {reason}", super::go_quote(raw))
}

/// Go's `url.ParseRequestURI`.
fn parse_request_uri(raw: &str) -> Result<Url, String> {
    parse_inner(raw, true).map_err(|e| parse_error(raw, &e))
}

/// Go's `url.Parse`: the fragment cut off first.
fn parse(raw: &str) -> Result<Url, String> {
    let (before, fragment) = raw.split_once('#').unwrap_or((raw, ""));
    let mut url = parse_inner(before, false).map_err(|e| parse_error(before, &e))?;
    if !fragment.is_empty() {
        url.fragment = unescape(fragment, Mode::Fragment).map_err(|e| parse_error(raw, &e))?;
    }
    Ok(url)
}

impl Url {
    /// Go's `EscapedPath`.
    fn escaped_path(&self) -> String {
        if !self.raw_path.is_empty()
            && valid_encoded(&self.raw_path)
            && unescape(&self.raw_path, Mode::Path).is_ok_and(|p| p == self.path)
        {
            return self.raw_path.clone();
        }
        if self.path == "*" {
            return "*".into();
        }
        escape(&self.path, Mode::Path)
    }

    /// Go's `splitHostPort` of the host.
    fn host_and_port(&self) -> (&str, &str) {
        let mut host = self.host.as_str();
        let mut port = "";
        if let Some(colon) = host.rfind(':')
            && valid_optional_port(&host[colon..])
        {
            (host, port) = (&self.host[..colon], &self.host[colon + 1..]);
        }
        if host.starts_with('[') && host.ends_with(']') && host.len() >= 2 {
            host = &host[1..host.len() - 1];
        }
        (host, port)
    }
}

/// Go's `validEncoded` for a path.
fn valid_encoded(text: &str) -> bool {
    text.bytes()
        .all(|c| b"!$&'()*+,;=:@[]%".contains(&c) || !should_escape(c, Mode::Path))
}

/// Go's `ParseQuery`, its errors ignored: the values of each key in order.
fn query(raw: &str) -> Vec<(String, Vec<String>)> {
    let mut values: Vec<(String, Vec<String>)> = Vec::new();
    for pair in raw.split('&') {
        if pair.is_empty() || pair.contains(';') {
            continue;
        }
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let (Ok(key), Ok(value)) = (
            unescape(key, Mode::QueryComponent),
            unescape(value, Mode::QueryComponent),
        ) else {
            continue;
        };
        match values.iter_mut().find(|(k, _)| *k == key) {
            Some((_, list)) => list.push(value),
            None => values.push((key, vec![value])),
        }
    }
    values
}

/// Why Go's `url.ParseRequestURI` refuses `text` (the `uri` format's message), if it does.
pub(super) fn request_uri_error(text: &str) -> Option<String> {
    parse_request_uri(text).err()
}

fn url(text: &CelString<'_>) -> Result<Url, ExecutionError> {
    let wrap = |e: String| {
        ExecutionError::function_error(
            "url",
            format!("URL parse error during conversion from string: {e}"),
        )
    };
    parse_request_uri(text.inner()).map_err(wrap)?;
    parse(text.inner()).map_err(wrap)
}

fn is_url(text: &CelString<'_>) -> CelBool {
    parse_request_uri(text.inner()).is_ok().into()
}

fn get_scheme(url: &Url) -> CelString<'static> {
    url.scheme.clone().into()
}

fn get_host(url: &Url) -> CelString<'static> {
    url.host.clone().into()
}

fn get_hostname(url: &Url) -> CelString<'static> {
    url.host_and_port().0.to_string().into()
}

fn get_port(url: &Url) -> CelString<'static> {
    url.host_and_port().1.to_string().into()
}

fn get_escaped_path(url: &Url) -> CelString<'static> {
    url.escaped_path().into()
}

fn get_query(url: &Url) -> CelMap<'static> {
    let entries: HashMap<CelMapKey<'static>, Box<dyn Val + 'static>> = query(&url.raw_query)
        .into_iter()
        .map(|(key, values)| {
            let list: Vec<Box<dyn Val>> = values
                .into_iter()
                .map(|v| Box::new(CelString::from(v)) as Box<dyn Val>)
                .collect();
            (
                CelMapKey::from(key),
                Box::new(CelList::from(list)) as Box<dyn Val>,
            )
        })
        .collect();
    CelMap::from(entries)
}

/// Registers the library's overloads.
pub(super) fn extension(env: &mut Env) -> Result<(), DeclarationError> {
    cel::add_overload!(env, fn url: (CelString) -> Result<Url>, id = "string_to_url")?;
    cel::add_overload!(env, fn is_url: (CelString) -> CelBool, name = "isURL", id = "is_url_string")?;
    cel::add_member_overload!(env, fn get_scheme: (Url) -> CelString, id = "url_get_scheme")?;
    cel::add_member_overload!(env, fn get_host: (Url) -> CelString, id = "url_get_host")?;
    cel::add_member_overload!(env, fn get_hostname: (Url) -> CelString, id = "url_get_hostname")?;
    cel::add_member_overload!(env, fn get_port: (Url) -> CelString, id = "url_get_port")?;
    cel::add_member_overload!(env, fn get_escaped_path: (Url) -> CelString, id = "url_get_escaped_path")?;
    cel::add_member_overload!(env, fn get_query: (Url) -> CelMap, id = "url_get_query")?;
    Ok(())
}

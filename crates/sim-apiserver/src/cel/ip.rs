//! Kubernetes' IP library (k8s.io/apiserver/pkg/cel/library/ip.go): `ip(string)` and
//! `isIP`, `ip.isCanonical`, an address's `family`, `isUnspecified`, `isLoopback`,
//! `isLinkLocalMulticast`, `isLinkLocalUnicast`, `isGlobalUnicast` and `string(ip)`, with
//! Go's `netip.ParseAddr` deciding what an address is and wording why it is not one.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use cel::common::types::{CelBool, CelInt, CelString};
use cel::{DeclarationError, Env, ExecutionError};

/// A `net.IP`: an IPv4 or IPv6 address, without a zone and not IPv4-mapped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Ip(pub(super) IpAddr);

super::opaque_value!(Ip, "net.IP");

/// Why `netip.ParseAddr` refuses a string: `ParseAddr("x"): message (at "rest")`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("ParseAddr({}): {message}{}", super::go_quote(input), at.as_ref().map(|at| format!(" (at {})", super::go_quote(at))).unwrap_or_default())]
pub(super) struct AddrError {
    input: String,
    message: &'static str,
    at: Option<String>,
}

/// An address as `netip.ParseAddr` reads it, with its zone (empty without one).
fn parse_addr(input: &str) -> Result<(IpAddr, String), AddrError> {
    let error = |message| AddrError {
        input: input.to_string(),
        message,
        at: None,
    };
    for c in input.bytes() {
        match c {
            b'.' => return parse_v4(input, input).map(|a| (IpAddr::V4(a), String::new())),
            b':' => return parse_v6(input),
            b'%' => return Err(error("missing IPv6 address")),
            _ => {}
        }
    }
    Err(error("unable to parse IP"))
}

/// The four fields of a dotted IPv4 address: `text`, a part of `input`.
fn parse_v4(input: &str, text: &str) -> Result<Ipv4Addr, AddrError> {
    let error = |message, at: Option<&str>| AddrError {
        input: input.to_string(),
        message,
        at: at.map(str::to_string),
    };
    let bytes = text.as_bytes();
    let mut fields = [0u8; 4];
    let (mut value, mut position, mut digits) = (0u32, 0usize, 0usize);
    for (i, &c) in bytes.iter().enumerate() {
        if c.is_ascii_digit() {
            if digits == 1 && value == 0 {
                return Err(error("IPv4 field has octet with leading zero", None));
            }
            value = value * 10 + u32::from(c - b'0');
            digits += 1;
            if value > 255 {
                return Err(error("IPv4 field has value >255", None));
            }
        } else if c == b'.' {
            if i == 0 || i == bytes.len() - 1 || bytes[i - 1] == b'.' {
                return Err(error(
                    "IPv4 field must have at least one digit",
                    Some(&text[i..]),
                ));
            }
            if position == 3 {
                return Err(error("IPv4 address too long", None));
            }
            fields[position] = value as u8;
            position += 1;
            value = 0;
            digits = 0;
        } else {
            return Err(error("unexpected character", Some(&text[i..])));
        }
    }
    if position < 3 {
        return Err(error("IPv4 address too short", None));
    }
    fields[3] = value as u8;
    Ok(Ipv4Addr::from(fields))
}

/// An IPv6 address as `netip`'s parseIPv6 reads it, with its zone.
fn parse_v6(input: &str) -> Result<(IpAddr, String), AddrError> {
    let error = |message, at: Option<&str>| AddrError {
        input: input.to_string(),
        message,
        at: at.map(str::to_string),
    };
    let (mut s, zone) = match input.find('%') {
        Some(at) => {
            let zone = &input[at + 1..];
            if zone.is_empty() {
                return Err(error("zone must be a non-empty string", None));
            }
            (&input[..at], zone.to_string())
        }
        None => (input, String::new()),
    };
    let address_end = input.len() - if zone.is_empty() { 0 } else { zone.len() + 1 };
    let mut ip = [0u8; 16];
    let mut ellipsis: Option<usize> = None;
    if s.starts_with("::") {
        ellipsis = Some(0);
        s = &s[2..];
        if s.is_empty() {
            return Ok((IpAddr::V6(Ipv6Addr::UNSPECIFIED), zone));
        }
    }
    let mut i = 0;
    while i < 16 {
        let bytes = s.as_bytes();
        let mut off = 0;
        let mut acc: u32 = 0;
        while off < bytes.len() {
            let Some(digit) = (bytes[off] as char).to_digit(16) else {
                break;
            };
            acc = (acc << 4) + digit;
            if off > 3 {
                return Err(error("each group must have 4 or less digits", Some(s)));
            }
            if acc > u32::from(u16::MAX) {
                return Err(error("IPv6 field has value >=2^16", Some(s)));
            }
            off += 1;
        }
        if off == 0 {
            return Err(error(
                "each colon-separated field must have at least one digit",
                Some(s),
            ));
        }
        if off < bytes.len() && bytes[off] == b'.' {
            if ellipsis.is_none() && i != 12 {
                return Err(error(
                    "embedded IPv4 address must replace the final 2 fields of the address",
                    Some(s),
                ));
            }
            if i + 4 > 16 {
                return Err(error(
                    "too many hex fields to fit an embedded IPv4 at the end of the address",
                    Some(s),
                ));
            }
            let v4 = parse_v4(input, &input[address_end - s.len()..address_end])?;
            ip[i..i + 4].copy_from_slice(&v4.octets());
            s = "";
            i += 4;
            break;
        }
        ip[i] = (acc >> 8) as u8;
        ip[i + 1] = acc as u8;
        i += 2;
        s = &s[off..];
        if s.is_empty() {
            break;
        }
        if !s.starts_with(':') {
            return Err(error("unexpected character, want colon", Some(s)));
        } else if s.len() == 1 {
            return Err(error("colon must be followed by more characters", Some(s)));
        }
        s = &s[1..];
        if s.starts_with(':') {
            if ellipsis.is_some() {
                return Err(error("multiple :: in address", Some(s)));
            }
            ellipsis = Some(i);
            s = &s[1..];
            if s.is_empty() {
                break;
            }
        }
    }
    if !s.is_empty() {
        return Err(error("trailing garbage after address", Some(s)));
    }
    if i < 16 {
        let Some(ellipsis) = ellipsis else {
            return Err(error("address string too short", None));
        };
        let n = 16 - i;
        for j in (ellipsis..i).rev() {
            ip[j + n] = ip[j];
        }
        ip[ellipsis..ellipsis + n].fill(0);
    } else if ellipsis.is_some() {
        return Err(error(
            "the :: must expand to at least one field of zeros",
            None,
        ));
    }
    Ok((IpAddr::V6(Ipv6Addr::from(ip)), zone))
}

/// Why the library refuses an address.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(super) enum IpError {
    /// `netip.ParseAddr` refused it.
    #[error(
        "IP Address {} parse error during conversion from string: {source}",
        super::go_quote(input)
    )]
    Parse { input: String, source: AddrError },
    /// It has a zone.
    #[error("IP address {} with zone value is not allowed", super::go_quote(.0))]
    Zone(String),
    /// It is an IPv4-mapped IPv6 address.
    #[error("IPv4-mapped IPv6 address {} is not allowed", super::go_quote(.0))]
    Mapped(String),
}

/// An address as the library's parseIPAddr takes it.
///
/// # Errors
/// An [`IpError`] worded as the library words it.
pub(super) fn parse(input: &str) -> Result<Ip, IpError> {
    let (address, zone) = parse_addr(input).map_err(|source| IpError::Parse {
        input: input.to_string(),
        source,
    })?;
    if !zone.is_empty() {
        return Err(IpError::Zone(input.to_string()));
    }
    if let IpAddr::V6(v6) = address
        && v6.to_ipv4_mapped().is_some()
    {
        return Err(IpError::Mapped(input.to_string()));
    }
    Ok(Ip(address))
}

/// `netip.ParseAddr` for a CIDR's address: the address and whether it had a zone.
pub(super) fn parse_prefix_address(input: &str) -> Result<(IpAddr, bool), AddrError> {
    parse_addr(input).map(|(address, zone)| (address, !zone.is_empty()))
}

/// An address as Go's `netip.Addr.String` writes it (RFC 5952, as Rust writes it too).
pub(super) fn text(address: IpAddr) -> String {
    address.to_string()
}

fn ip(text: &CelString<'_>) -> Result<Ip, ExecutionError> {
    parse(text.inner()).map_err(|e| ExecutionError::function_error("ip", e))
}

fn is_ip(text: &CelString<'_>) -> CelBool {
    parse(text.inner()).is_ok().into()
}

fn is_canonical(text: &CelString<'_>) -> Result<CelBool, ExecutionError> {
    let address =
        parse(text.inner()).map_err(|e| ExecutionError::function_error("ip.isCanonical", e))?;
    Ok((self::text(address.0) == text.inner()).into())
}

fn family(address: &Ip) -> CelInt {
    match address.0 {
        IpAddr::V4(_) => 4,
        IpAddr::V6(_) => 6,
    }
    .into()
}

fn is_unspecified(address: &Ip) -> CelBool {
    address.0.is_unspecified().into()
}

fn is_loopback(address: &Ip) -> CelBool {
    address.0.is_loopback().into()
}

/// 224.0.0.0/24 and ff02::/16, as Go has it.
fn is_link_local_multicast(address: &Ip) -> CelBool {
    match address.0 {
        IpAddr::V4(v4) => v4.octets()[..3] == [224, 0, 0],
        IpAddr::V6(v6) => v6.segments()[0] & 0xff0f == 0xff02,
    }
    .into()
}

/// 169.254.0.0/16 and fe80::/10.
fn link_local_unicast(address: IpAddr) -> bool {
    match address {
        IpAddr::V4(v4) => v4.octets()[..2] == [169, 254],
        IpAddr::V6(v6) => v6.segments()[0] & 0xffc0 == 0xfe80,
    }
}

fn is_link_local_unicast(address: &Ip) -> CelBool {
    link_local_unicast(address.0).into()
}

/// Go's IsGlobalUnicast: neither unspecified, broadcast, loopback, multicast nor link-local
/// unicast (private addresses are global unicast).
fn is_global_unicast(address: &Ip) -> CelBool {
    let address = address.0;
    let broadcast = address == IpAddr::V4(Ipv4Addr::BROADCAST);
    (!address.is_unspecified()
        && !broadcast
        && !address.is_loopback()
        && !address.is_multicast()
        && !link_local_unicast(address))
    .into()
}

fn ip_string(address: &Ip) -> CelString<'static> {
    text(address.0).into()
}

/// Registers the library's overloads.
pub(super) fn extension(env: &mut Env) -> Result<(), DeclarationError> {
    cel::add_overload!(env, fn ip: (CelString) -> Result<Ip>, id = "string_to_ip")?;
    cel::add_overload!(env, fn is_ip: (CelString) -> CelBool, name = "isIP", id = "is_ip")?;
    cel::add_overload!(env, fn is_canonical: (CelString) -> Result<CelBool>, name = "ip.isCanonical", id = "ip_is_canonical")?;
    cel::add_member_overload!(env, fn family: (Ip) -> CelInt, id = "ip_family")?;
    cel::add_member_overload!(env, fn is_unspecified: (Ip) -> CelBool, id = "ip_is_unspecified")?;
    cel::add_member_overload!(env, fn is_loopback: (Ip) -> CelBool, id = "ip_is_loopback")?;
    cel::add_member_overload!(env, fn is_link_local_multicast: (Ip) -> CelBool, id = "ip_is_link_local_multicast")?;
    cel::add_member_overload!(env, fn is_link_local_unicast: (Ip) -> CelBool, id = "ip_is_link_local_unicast")?;
    cel::add_member_overload!(env, fn is_global_unicast: (Ip) -> CelBool, id = "ip_is_global_unicast")?;
    cel::add_overload!(env, fn ip_string: (Ip) -> CelString, name = "string", id = "ip_to_string")?;
    Ok(())
}

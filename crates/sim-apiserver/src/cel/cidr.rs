//! Kubernetes' CIDR library (k8s.io/apiserver/pkg/cel/library/cidr.go): `cidr(string)` and
//! `isCIDR`, a prefix's `containsIP`, `containsCIDR` (of a string or a value), `ip`,
//! `masked`, `prefixLength` and `string(cidr)`, with Go's `netip.ParsePrefix` deciding what
//! a prefix is and wording why it is not one.

use std::net::IpAddr;

use cel::common::types::{CelBool, CelInt, CelString};
use cel::{DeclarationError, Env, ExecutionError};

use super::ip::{self, Ip};

/// A `net.CIDR`: an address (its host bits kept) and a prefix length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Cidr {
    address: IpAddr,
    bits: u8,
}

super::opaque_value!(Cidr, "net.CIDR");

/// The wording of the library's parse errors: its prefix twice, as it wraps its own error.
const PARSE_ERROR: &str = "network address parse error during conversion from string";

/// A prefix as `netip.ParsePrefix` reads it.
fn parse_prefix(input: &str) -> Result<Cidr, String> {
    let error =
        |message: String| format!("netip.ParsePrefix({}): {message}", super::go_quote(input));
    let Some(slash) = input.rfind('/') else {
        return Err(error("no '/'".into()));
    };
    let (address, zoned) =
        ip::parse_prefix_address(&input[..slash]).map_err(|e| error(e.to_string()))?;
    if zoned {
        return Err(error("IPv6 zones cannot be present in a prefix".into()));
    }
    let bits_text = &input[slash + 1..];
    let bad_bits = || {
        error(format!(
            "bad bits after slash: {}",
            super::go_quote(bits_text)
        ))
    };
    if bits_text.len() > 1 && !matches!(bits_text.as_bytes()[0], b'1'..=b'9') {
        return Err(bad_bits());
    }
    if bits_text.is_empty() || !bits_text.bytes().all(|c| c.is_ascii_digit()) {
        return Err(bad_bits());
    }
    let bits: u64 = bits_text.parse().map_err(|_| bad_bits())?;
    let most = if address.is_ipv4() { 32 } else { 128 };
    if bits > most {
        return Err(error("prefix length out of range".into()));
    }
    Ok(Cidr {
        address,
        bits: bits as u8,
    })
}

/// A prefix as the library's parseCIDR takes it, worded as `cidr()` words its refusal.
fn parse(input: &str) -> Result<Cidr, String> {
    let cidr = parse_prefix(input).map_err(|e| format!("{PARSE_ERROR}: {PARSE_ERROR}: {e}"))?;
    if let IpAddr::V6(v6) = cidr.address
        && v6.to_ipv4_mapped().is_some()
    {
        return Err(format!(
            "{PARSE_ERROR}: IPv4-mapped IPv6 address {} is not allowed",
            super::go_quote(input)
        ));
    }
    Ok(cidr)
}

/// `address` with the bits after the first `bits` cleared.
fn masked_address(address: IpAddr, bits: u8) -> IpAddr {
    match address {
        IpAddr::V4(v4) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(bits)).unwrap_or(0);
            IpAddr::V4((u32::from(v4) & mask).into())
        }
        IpAddr::V6(v6) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(bits)).unwrap_or(0);
            IpAddr::V6((u128::from(v6) & mask).into())
        }
    }
}

impl Cidr {
    fn contains(&self, address: IpAddr) -> bool {
        address.is_ipv4() == self.address.is_ipv4()
            && masked_address(address, self.bits) == masked_address(self.address, self.bits)
    }
}

fn cidr(text: &CelString<'_>) -> Result<Cidr, ExecutionError> {
    parse(text.inner()).map_err(|e| ExecutionError::function_error("cidr", e))
}

fn is_cidr(text: &CelString<'_>) -> CelBool {
    parse(text.inner()).is_ok().into()
}

fn contains_ip(cidr: &Cidr, address: &Ip) -> CelBool {
    cidr.contains(address.0).into()
}

/// A string that is no address is `no such overload`, not its parse error: the library
/// checks the parsed value's type and reports the prefix.
fn contains_ip_string(cidr: &Cidr, text: &CelString<'_>) -> Result<CelBool, ExecutionError> {
    let address = ip::parse(text.inner()).map_err(|_| {
        ExecutionError::no_such_member_overload(
            "containsIP",
            vec!["net.CIDR".into(), "string".into()],
        )
    })?;
    Ok(contains_ip(cidr, &address))
}

/// Go's `Overlaps` and a prefix no shorter than the container's.
fn contains_cidr(cidr: &Cidr, other: &Cidr) -> CelBool {
    (cidr.bits <= other.bits && cidr.contains(other.address)).into()
}

fn contains_cidr_string(cidr: &Cidr, text: &CelString<'_>) -> Result<CelBool, ExecutionError> {
    let other =
        parse(text.inner()).map_err(|e| ExecutionError::function_error("containsCIDR", e))?;
    Ok(contains_cidr(cidr, &other))
}

fn cidr_ip(cidr: &Cidr) -> Ip {
    Ip(cidr.address)
}

fn masked(cidr: &Cidr) -> Cidr {
    Cidr {
        address: masked_address(cidr.address, cidr.bits),
        bits: cidr.bits,
    }
}

fn prefix_length(cidr: &Cidr) -> CelInt {
    i64::from(cidr.bits).into()
}

fn cidr_string(cidr: &Cidr) -> CelString<'static> {
    format!("{}/{}", ip::text(cidr.address), cidr.bits).into()
}

/// Registers the library's overloads.
pub(super) fn extension(env: &mut Env) -> Result<(), DeclarationError> {
    cel::add_overload!(env, fn cidr: (CelString) -> Result<Cidr>, id = "string_to_cidr")?;
    cel::add_overload!(env, fn is_cidr: (CelString) -> CelBool, name = "isCIDR", id = "is_cidr")?;
    cel::add_member_overload!(env, fn contains_ip_string: (Cidr, CelString) -> Result<CelBool>, name = "containsIP", id = "cidr_contains_ip_string")?;
    cel::add_member_overload!(env, fn contains_ip: (Cidr, Ip) -> CelBool, name = "containsIP", id = "cidr_contains_ip_ip")?;
    cel::add_member_overload!(env, fn contains_cidr_string: (Cidr, CelString) -> Result<CelBool>, name = "containsCIDR", id = "cidr_contains_cidr_string")?;
    cel::add_member_overload!(env, fn contains_cidr: (Cidr, Cidr) -> CelBool, name = "containsCIDR", id = "cidr_contains_cidr")?;
    cel::add_member_overload!(env, fn cidr_ip: (Cidr) -> Ip, name = "ip", id = "cidr_ip")?;
    cel::add_member_overload!(env, fn masked: (Cidr) -> Cidr, id = "cidr_masked")?;
    cel::add_member_overload!(env, fn prefix_length: (Cidr) -> CelInt, id = "cidr_prefix_length")?;
    cel::add_overload!(env, fn cidr_string: (Cidr) -> CelString, name = "string", id = "cidr_to_string")?;
    Ok(())
}

//! X.509 as kube-apiserver's Go code reads it: certificate signing requests as
//! `certificates.ParseCSR` and `CheckSignature` read them (with Go's messages), the
//! certificates of `status.certificate` as `validateCertificate` reads them, and a summary of
//! an issued certificate that two clusters with different CAs can compare.
//!
//! # Caveats
//! - Go decodes a request with `encoding/asn1`; the messages of a malformed outer structure
//!   (empty, wrong tag, truncated, trailing data) are Go's, those of a malformed inner
//!   structure are only Go-like (`asn1: structure error: …`).
//! - Signatures are checked with `ring` through `x509-parser`: RSA PKCS #1 v1.5 and PSS,
//!   ECDSA P-256 and P-384, Ed25519. Go also takes ECDSA P-521, which is refused here.

use std::net::IpAddr;

use serde_json::{Value, json};
use x509_parser::certificate::X509Certificate;
use x509_parser::certification_request::X509CertificationRequest;
use x509_parser::extensions::{GeneralName, ParsedExtension};
use x509_parser::prelude::FromDer as _;
use x509_parser::x509::X509Name;

use super::pem;

/// OIDs of the name attributes Go's `pkix.Name` keeps.
pub const OID_COMMON_NAME: &str = "2.5.4.3";
/// `serialNumber`.
pub const OID_SERIAL_NUMBER: &str = "2.5.4.5";
/// `C`.
pub const OID_COUNTRY: &str = "2.5.4.6";
/// `L`.
pub const OID_LOCALITY: &str = "2.5.4.7";
/// `ST`.
pub const OID_PROVINCE: &str = "2.5.4.8";
/// `STREET`.
pub const OID_STREET: &str = "2.5.4.9";
/// `O`.
pub const OID_ORGANIZATION: &str = "2.5.4.10";
/// `OU`.
pub const OID_ORGANIZATIONAL_UNIT: &str = "2.5.4.11";
/// `postalCode`.
pub const OID_POSTAL_CODE: &str = "2.5.4.17";

/// A parsed certificate signing request: what the signers and the admission plugins read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The DER of the whole request.
    pub der: Vec<u8>,
    /// The subject's attributes with string values, relative distinguished name by name, as
    /// `(dotted OID, value)`.
    pub subject: Vec<Vec<(String, String)>>,
    /// The DER of the subjectPublicKeyInfo.
    pub public_key_info: Vec<u8>,
    /// Requested DNS names.
    pub dns_names: Vec<String>,
    /// Requested e-mail addresses.
    pub email_addresses: Vec<String>,
    /// Requested IP addresses.
    pub ip_addresses: Vec<IpAddr>,
    /// Requested URIs.
    pub uris: Vec<String>,
}

impl Request {
    /// Every value of one attribute, in order (`pkix.Name`'s lists).
    pub fn values(&self, oid: &str) -> Vec<String> {
        self.subject
            .iter()
            .flatten()
            .filter(|(o, _)| o == oid)
            .map(|(_, v)| v.clone())
            .collect()
    }

    /// `Subject.Organization`.
    pub fn organizations(&self) -> Vec<String> {
        self.values(OID_ORGANIZATION)
    }

    /// `Subject.CommonName`: the last common name, or empty.
    pub fn common_name(&self) -> String {
        self.values(OID_COMMON_NAME).pop().unwrap_or_default()
    }
}

/// Go's `asn1.SyntaxError`.
fn syntax(message: &str) -> String {
    format!("asn1: syntax error: {message}")
}

/// Go's `asn1.StructuralError`.
fn structural(message: &str) -> String {
    format!("asn1: structure error: {message}")
}

/// `%+v` of a zero `fieldParameters` (what a top-level `asn1.Unmarshal` passes).
const NO_PARAMS: &str = "{optional:false explicit:false application:false private:false defaultValue:<nil> tag:<nil> stringType:0 timeType:0 set:false omitEmpty:false}";

/// The outer element as `asn1.Unmarshal` into a struct named `type_name` reads it: its
/// length in bytes, or Go's error.
fn outer_sequence(der: &[u8], type_name: &str) -> Result<usize, String> {
    if der.is_empty() {
        return Err(syntax("sequence truncated"));
    }
    let first = der[0];
    let class = first >> 6;
    let compound = first & 0x20 != 0;
    let mut tag = u64::from(first & 0x1f);
    let mut offset = 1;
    if tag == 0x1f {
        tag = 0;
        let mut shifted = 0;
        loop {
            let Some(&b) = der.get(offset) else {
                return Err(syntax("truncated base 128 integer"));
            };
            offset += 1;
            shifted += 1;
            if shifted == 5 {
                return Err(structural("base 128 integer too large"));
            }
            tag = (tag << 7) | u64::from(b & 0x7f);
            if shifted == 1 && b == 0x80 {
                return Err(syntax("integer is not minimally encoded"));
            }
            if b & 0x80 == 0 {
                break;
            }
        }
        if tag > i32::MAX as u64 {
            return Err(structural("base 128 integer too large"));
        }
        if tag < 0x1f {
            return Err(syntax("non-minimal tag"));
        }
    }
    let Some(&b) = der.get(offset) else {
        return Err(syntax("truncated tag or length"));
    };
    offset += 1;
    let length = if b & 0x80 == 0 {
        usize::from(b & 0x7f)
    } else {
        let count = usize::from(b & 0x7f);
        if count == 0 {
            return Err(syntax("indefinite length found (not DER)"));
        }
        let mut length: usize = 0;
        for _ in 0..count {
            let Some(&b) = der.get(offset) else {
                return Err(syntax("truncated tag or length"));
            };
            offset += 1;
            if length >= 1 << 23 {
                return Err(structural("length too large"));
            }
            length = (length << 8) | usize::from(b);
            if length == 0 {
                return Err(structural("superfluous leading zeros in length"));
            }
        }
        if length < 0x80 {
            return Err(structural("non-minimal length"));
        }
        length
    };
    if class != 0 || tag != 16 || !compound {
        return Err(structural(&format!(
            "tags don't match (16 vs {{class:{class} tag:{tag} length:{length} isCompound:{compound}}}) {NO_PARAMS} {type_name} @{offset}"
        )));
    }
    if offset + length > der.len() {
        return Err(syntax("data truncated"));
    }
    Ok(offset + length)
}

/// The attributes of a name with string values, as Go's `FillFromRDNSequence` sees them.
fn name_attributes(name: &X509Name<'_>) -> Vec<Vec<(String, String)>> {
    name.iter()
        .map(|rdn| {
            rdn.iter()
                .filter_map(|atv| {
                    let value = atv.as_str().ok()?.to_string();
                    Some((atv.attr_type().to_id_string(), value))
                })
                .collect::<Vec<_>>()
        })
        .filter(|rdn: &Vec<(String, String)>| !rdn.is_empty())
        .collect()
}

/// `x509.ParseCertificateRequest`, then `CheckSignature` when `check_signature` is set.
///
/// # Errors
/// Go's message for what is wrong.
pub fn parse_request(der: &[u8], check_signature: bool) -> Result<Request, String> {
    let end = outer_sequence(der, "certificateRequest")?;
    if end != der.len() {
        return Err(syntax("trailing data"));
    }
    let (_, csr) = X509CertificationRequest::from_der(der)
        .map_err(|e| structural(&format!("malformed certificate request: {e}")))?;
    let info = &csr.certification_request_info;
    let mut request = Request {
        der: der.to_vec(),
        subject: name_attributes(&info.subject),
        public_key_info: info.subject_pki.raw.to_vec(),
        dns_names: Vec::new(),
        email_addresses: Vec::new(),
        ip_addresses: Vec::new(),
        uris: Vec::new(),
    };
    for extension in csr.requested_extensions().into_iter().flatten() {
        if let ParsedExtension::SubjectAlternativeName(san) = extension {
            for name in &san.general_names {
                match name {
                    GeneralName::DNSName(n) => request.dns_names.push(n.to_string()),
                    GeneralName::RFC822Name(n) => request.email_addresses.push(n.to_string()),
                    GeneralName::URI(n) => request.uris.push(n.to_string()),
                    GeneralName::IPAddress(bytes) => match bytes.len() {
                        4 => request.ip_addresses.push(IpAddr::from(
                            <[u8; 4]>::try_from(*bytes).unwrap_or_default(),
                        )),
                        16 => request.ip_addresses.push(IpAddr::from(
                            <[u8; 16]>::try_from(*bytes).unwrap_or_default(),
                        )),
                        n => return Err(format!("x509: cannot parse IP address of length {n}")),
                    },
                    _ => {}
                }
            }
        }
    }
    if check_signature {
        check_request_signature(&csr)?;
    }
    Ok(request)
}

/// `CheckSignature` of a request, with Go's messages.
fn check_request_signature(csr: &X509CertificationRequest<'_>) -> Result<(), String> {
    use x509_parser::error::X509Error;
    let algorithm = csr.signature_algorithm.algorithm.to_id_string();
    let family = match algorithm.as_str() {
        "1.2.840.10045.4.3.2" | "1.2.840.10045.4.3.3" | "1.2.840.10045.4.3.4" => "ECDSA",
        "1.2.840.113549.1.1.5"
        | "1.2.840.113549.1.1.11"
        | "1.2.840.113549.1.1.12"
        | "1.2.840.113549.1.1.13"
        | "1.2.840.113549.1.1.10" => "RSA",
        "1.3.101.112" => "Ed25519",
        _ => return Err("x509: cannot verify signature: algorithm unimplemented".into()),
    };
    let key = csr
        .certification_request_info
        .subject_pki
        .algorithm
        .algorithm
        .to_id_string();
    let key_type = match key.as_str() {
        "1.2.840.10045.2.1" => "*ecdsa.PublicKey",
        "1.2.840.113549.1.1.1" => "*rsa.PublicKey",
        "1.3.101.112" => "ed25519.PublicKey",
        _ => "<nil>",
    };
    let expected = match family {
        "ECDSA" => "*ecdsa.PublicKey",
        "RSA" => "*rsa.PublicKey",
        _ => "ed25519.PublicKey",
    };
    if key_type == "<nil>" {
        return Err("x509: cannot verify signature: algorithm unimplemented".into());
    }
    if key_type != expected {
        return Err(format!(
            "x509: signature algorithm specifies an {family} public key, but have public key of type {key_type}"
        ));
    }
    match csr.verify_signature() {
        Ok(()) => Ok(()),
        Err(X509Error::SignatureUnsupportedAlgorithm) => {
            Err("x509: cannot verify signature: algorithm unimplemented".into())
        }
        Err(_) => Err(match family {
            "ECDSA" => "x509: ECDSA verification failure".into(),
            "RSA" => "crypto/rsa: verification error".into(),
            _ => "x509: Ed25519 verification failure".into(),
        }),
    }
}

/// `certificates.ParseCSR`: the first PEM block must be a `CERTIFICATE REQUEST`.
///
/// # Errors
/// Go's message.
pub fn parse_request_pem(pem_bytes: &[u8], check_signature: bool) -> Result<Request, String> {
    match pem::decode(pem_bytes) {
        Some((block, _)) if block.kind == "CERTIFICATE REQUEST" => {
            parse_request(&block.bytes, check_signature)
        }
        _ => Err("PEM block type must be CERTIFICATE REQUEST".into()),
    }
}

/// `x509.ParseCertificates` of one PEM block's bytes: how many certificates it holds.
fn count_certificates(mut der: &[u8]) -> Result<usize, String> {
    let mut count = 0;
    while !der.is_empty() {
        let (rest, _) = X509Certificate::from_der(der)
            .map_err(|_| "x509: malformed certificate".to_string())?;
        der = rest;
        count += 1;
    }
    Ok(count)
}

/// `validateCertificate` of `status.certificate`: nothing, or only well-formed `CERTIFICATE`
/// blocks without headers, at least one.
///
/// # Errors
/// Go's message.
pub fn validate_certificate_pem(mut data: &[u8]) -> Result<(), String> {
    if data.is_empty() {
        return Ok(());
    }
    let mut blocks = 0;
    while let Some((block, rest)) = pem::decode(data) {
        if block.kind != "CERTIFICATE" {
            return Err(format!(
                "only CERTIFICATE PEM blocks are allowed, found {}",
                crate::names::go_quote(&block.kind)
            ));
        }
        if !block.headers.is_empty() {
            return Err("no PEM block headers are permitted".into());
        }
        blocks += 1;
        if count_certificates(&block.bytes)? == 0 {
            return Err("found CERTIFICATE PEM block containing 0 certificates".into());
        }
        data = rest;
    }
    if blocks == 0 {
        return Err("must contain at least one CERTIFICATE PEM block".into());
    }
    Ok(())
}

fn b64(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn string_tag(tag: x509_parser::der_parser::asn1_rs::Tag) -> String {
    use x509_parser::der_parser::asn1_rs::Tag;
    match tag {
        Tag::PrintableString => "PrintableString".into(),
        Tag::Utf8String => "UTF8String".into(),
        Tag::Ia5String => "IA5String".into(),
        Tag::NumericString => "NumericString".into(),
        Tag::T61String => "T61String".into(),
        Tag::BmpString => "BMPString".into(),
        other => format!("tag {}", other.0),
    }
}

/// A subject alternative name as `DNS:…`, `email:…`, `IP:…` or `URI:…`.
fn general_name(name: &GeneralName<'_>) -> String {
    match name {
        GeneralName::DNSName(n) => format!("DNS:{n}"),
        GeneralName::RFC822Name(n) => format!("email:{n}"),
        GeneralName::URI(n) => format!("URI:{n}"),
        GeneralName::IPAddress(bytes) => match bytes.len() {
            4 => format!(
                "IP:{}",
                IpAddr::from(<[u8; 4]>::try_from(*bytes).unwrap_or_default())
            ),
            16 => format!(
                "IP:{}",
                IpAddr::from(<[u8; 16]>::try_from(*bytes).unwrap_or_default())
            ),
            _ => format!("IP:{bytes:02x?}"),
        },
        other => other.to_string(),
    }
}

/// What two clusters must agree on about a certificate their signers issued for the same
/// request, leaving out what differs between any two CAs (serial number, issuer, key
/// identifiers, signature, absolute times) but saying whether the issuer is `ca_pem`, the
/// signature verifies with its key and the public key is the request's.
///
/// `certificate_pem` is `status.certificate` (decoded from base64); `request_pem` is
/// `spec.request`. A certificate that cannot be read is described by why.
pub fn describe_issued(certificate_pem: &[u8], ca_pem: &str, request_pem: &[u8]) -> Value {
    let mut blocks = Vec::new();
    let mut data = certificate_pem;
    while let Some((block, rest)) = pem::decode(data) {
        blocks.push(block);
        data = rest;
    }
    let Some(first) = blocks.first() else {
        return json!({"error": "no PEM block"});
    };
    let cert = match X509Certificate::from_der(&first.bytes) {
        Ok((_, cert)) => cert,
        Err(e) => return json!({"error": e.to_string()}),
    };
    let ca_der = pem::decode(ca_pem.as_bytes()).map(|(b, _)| b.bytes);
    let ca = ca_der
        .as_deref()
        .and_then(|der| X509Certificate::from_der(der).ok().map(|(_, c)| c));
    let request = parse_request_pem(request_pem, false).ok();
    let tbs = &cert.tbs_certificate;
    let subject: Vec<Value> = tbs
        .subject
        .iter()
        .map(|rdn| {
            Value::Array(
                rdn.iter()
                    .map(|atv| {
                        json!({"type": atv.attr_type().to_id_string(),
                               "value": String::from_utf8_lossy(atv.as_slice()),
                               "tag": string_tag(atv.attr_value().tag())})
                    })
                    .collect(),
            )
        })
        .collect();
    let ca_key_id = ca.as_ref().and_then(|ca| {
        ca.extensions()
            .iter()
            .find_map(|e| match e.parsed_extension() {
                ParsedExtension::SubjectKeyIdentifier(id) => Some(id.0.to_vec()),
                _ => None,
            })
    });
    let extensions: Vec<Value> = cert
        .extensions()
        .iter()
        .map(|e| {
            let oid = e.oid.to_id_string();
            let mut entry = json!({"oid": oid, "critical": e.critical});
            match e.parsed_extension() {
                ParsedExtension::AuthorityKeyIdentifier(aki) => {
                    entry["key identifier is the CA's"] = json!(
                        aki.key_identifier.as_ref().map(|k| k.0.to_vec()) == ca_key_id
                            && ca_key_id.is_some()
                    );
                }
                ParsedExtension::KeyUsage(usage) => {
                    entry["usages"] = json!(usage.to_string());
                    entry["der"] = json!(b64(e.value));
                }
                ParsedExtension::ExtendedKeyUsage(_)
                | ParsedExtension::SubjectAlternativeName(_) => {
                    entry["der"] = json!(b64(e.value));
                }
                ParsedExtension::BasicConstraints(bc) => {
                    entry["ca"] = json!(bc.ca);
                    entry["pathLenConstraint"] = json!(bc.path_len_constraint);
                }
                _ => entry["der"] = json!(b64(e.value)),
            }
            entry
        })
        .collect();
    let extended_usages: Vec<String> = cert
        .extended_key_usage()
        .ok()
        .flatten()
        .map(|eku| {
            let u = eku.value;
            let mut names: Vec<String> = [
                (u.any, "any"),
                (u.server_auth, "server auth"),
                (u.client_auth, "client auth"),
                (u.code_signing, "code signing"),
                (u.email_protection, "email protection"),
                (u.time_stamping, "timestamping"),
                (u.ocsp_signing, "ocsp signing"),
            ]
            .into_iter()
            .filter(|(on, _)| *on)
            .map(|(_, name)| name.to_string())
            .collect();
            names.extend(u.other.iter().map(|o| o.to_id_string()));
            names
        })
        .unwrap_or_default();
    let alt_names: Vec<String> = cert
        .subject_alternative_name()
        .ok()
        .flatten()
        .map(|san| san.value.general_names.iter().map(general_name).collect())
        .unwrap_or_default();
    let not_before = tbs.validity.not_before.timestamp();
    let not_after = tbs.validity.not_after.timestamp();
    let verifies = ca
        .as_ref()
        .is_some_and(|ca| cert.verify_signature(Some(ca.public_key())).is_ok());
    let serial = tbs.raw_serial();
    let serial_ok = !serial.is_empty()
        && serial[0] & 0x80 == 0
        && serial.iter().skip_while(|b| **b == 0).count() <= 16;
    let issuer_is_ca = ca
        .as_ref()
        .is_some_and(|ca| ca.tbs_certificate.subject.as_raw() == tbs.issuer.as_raw());
    let blocks: Vec<String> = blocks.iter().map(|b| b.kind.clone()).collect();
    json!({
        "blocks": blocks,
        "version": tbs.version.0 + 1,
        "serial number is positive and at most 128 bits": serial_ok,
        "signature algorithm": cert.signature_algorithm.algorithm.to_id_string(),
        "issuer is the cluster CA": issuer_is_ca,
        "signed by the cluster CA": verifies,
        "validity in seconds": not_after - not_before,
        "subject": subject,
        "subject DER": b64(tbs.subject.as_raw()),
        "public key is the request's": request.as_ref().is_some_and(|r| r.public_key_info == tbs.subject_pki.raw),
        "extensions": extensions,
        "extended key usages": extended_usages,
        "subject alternative names": alt_names,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(params: rcgen::CertificateParams) -> (String, rcgen::KeyPair) {
        let key = rcgen::KeyPair::generate().unwrap();
        let csr = params.serialize_request(&key).unwrap();
        (csr.pem().unwrap(), key)
    }

    #[test]
    fn a_request_is_read_with_its_subject_and_names() {
        let mut params =
            rcgen::CertificateParams::new(vec!["example.com".to_string(), "10.0.0.1".to_string()])
                .unwrap();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, "system:nodes");
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "system:node:a");
        let (pem, _) = request(params);
        let parsed = parse_request_pem(pem.as_bytes(), true).unwrap();
        assert_eq!(parsed.organizations(), vec!["system:nodes"]);
        assert_eq!(parsed.common_name(), "system:node:a");
        assert_eq!(parsed.dns_names, vec!["example.com"]);
        assert_eq!(
            parsed.ip_addresses,
            vec!["10.0.0.1".parse::<IpAddr>().unwrap()]
        );
    }

    #[test]
    fn a_request_that_is_not_pem_or_not_a_request_gets_go_s_messages() {
        assert_eq!(
            parse_request_pem(b"hello", true).unwrap_err(),
            "PEM block type must be CERTIFICATE REQUEST"
        );
        let wrong = pem::encode("CERTIFICATE REQUEST", b"hello");
        assert_eq!(
            parse_request_pem(wrong.as_bytes(), true).unwrap_err(),
            format!(
                "asn1: structure error: tags don't match (16 vs {{class:1 tag:8 length:101 isCompound:true}}) {NO_PARAMS} certificateRequest @2"
            )
        );
        let empty = pem::encode("CERTIFICATE REQUEST", b"");
        assert_eq!(
            parse_request_pem(empty.as_bytes(), true).unwrap_err(),
            "asn1: syntax error: sequence truncated"
        );
        let truncated = pem::encode("CERTIFICATE REQUEST", &[0x30, 0x05, 0x01]);
        assert_eq!(
            parse_request_pem(truncated.as_bytes(), true).unwrap_err(),
            "asn1: syntax error: data truncated"
        );
    }

    #[test]
    fn a_request_with_a_broken_signature_fails_as_go_s_ecdsa_check_fails() {
        let (pem_text, _) = request(rcgen::CertificateParams::default());
        let (block, _) = pem::decode(pem_text.as_bytes()).unwrap();
        let mut der = block.bytes;
        let last = der.len() - 1;
        der[last] ^= 0x01;
        assert_eq!(
            parse_request(&der, true).unwrap_err(),
            "x509: ECDSA verification failure"
        );
        let mut trailing = parse_request(&block_bytes(&pem_text), true).unwrap().der;
        trailing.push(0);
        assert_eq!(
            parse_request(&trailing, true).unwrap_err(),
            "asn1: syntax error: trailing data"
        );
    }

    fn block_bytes(pem_text: &str) -> Vec<u8> {
        pem::decode(pem_text.as_bytes()).unwrap().0.bytes
    }

    #[test]
    fn certificate_content_must_be_certificate_blocks_only() {
        assert_eq!(
            validate_certificate_pem(b"junk").unwrap_err(),
            "must contain at least one CERTIFICATE PEM block"
        );
        let (csr, _) = request(rcgen::CertificateParams::default());
        assert_eq!(
            validate_certificate_pem(csr.as_bytes()).unwrap_err(),
            "only CERTIFICATE PEM blocks are allowed, found \"CERTIFICATE REQUEST\""
        );
        let empty = pem::encode("CERTIFICATE", b"");
        assert_eq!(
            validate_certificate_pem(empty.as_bytes()).unwrap_err(),
            "found CERTIFICATE PEM block containing 0 certificates"
        );
        let garbage = pem::encode("CERTIFICATE", b"hello");
        assert_eq!(
            validate_certificate_pem(garbage.as_bytes()).unwrap_err(),
            "x509: malformed certificate"
        );
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::default()
            .self_signed(&key)
            .unwrap();
        assert!(validate_certificate_pem(cert.pem().as_bytes()).is_ok());
        assert!(validate_certificate_pem(b"").is_ok());
    }
}

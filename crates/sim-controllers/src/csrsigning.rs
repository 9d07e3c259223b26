//! kube-controller-manager's `csrsigning` controllers: approved CertificateSigningRequests of
//! the four `kubernetes.io` signers get a certificate from the cluster CA, as
//! `pkg/controller/certificates/signer` and `authority` (v1.34.4) issue it.
//!
//! # Guarantees
//! - Only requests that are Approved, not Denied, not Failed and without a certificate are
//!   signed, and only for `kubernetes.io/kube-apiserver-client`,
//!   `kubernetes.io/kube-apiserver-client-kubelet`, `kubernetes.io/kubelet-serving` and
//!   `kubernetes.io/legacy-unknown`; other signers' requests are left alone.
//! - A request its signer refuses (usages, subject or names it may not have) gets a Failed
//!   condition (`SignerValidationFailure`) with upstream's message instead.
//! - The certificate is what Go's `x509.CreateCertificate` makes of upstream's
//!   `PermissiveSigningPolicy`: the request's subject (re-encoded as `pkix.Name` does) and
//!   public key and names, the requested key usages and extended key usages, `CA:FALSE`,
//!   the CA's key identifier, a random 128-bit serial, valid from five minutes ago for the
//!   requested duration (at least ten minutes, at most `--cluster-signing-duration`; longer
//!   than eight hours also ending five minutes early), never past the CA.
//!
//! # Caveats
//! - The CA key must be ECDSA (P-256 or P-384), RSA or Ed25519, as rcgen loads it.
//! - URIs are copied as requested; Go re-renders them through `url.URL`.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestCondition,
};
use kube::api::{Api, PostParams};
use kube::runtime::watcher;
use rcgen::{KeyPair, SigningKey as _};
use sim_apiserver::certificates::{self, pem, x509};
use sim_apiserver::tls::SigningCa;
use x509_parser::prelude::FromDer as _;

use super::informer::{AbortOnDrop, Cache, Change};
use super::queue::Queue;

/// The signers kube-controller-manager runs.
pub const SIGNERS: &[&str] = &[
    certificates::KUBELET_SERVING,
    certificates::KUBE_APISERVER_CLIENT_KUBELET,
    certificates::KUBE_APISERVER_CLIENT,
    certificates::LEGACY_UNKNOWN,
];

/// How far back certificates start (`Backdate`).
const BACKDATE: i64 = 5 * 60;
/// Certificates shorter than this are not cut short by [`BACKDATE`] at their end (`Short`).
const SHORT: i64 = 8 * 3600;
/// The shortest certificate issued, whatever a request asks for.
const MINIMUM: i64 = 10 * 60;

/// Errors of the signer.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The CA certificate could not be read.
    #[error("cannot read the signing CA certificate")]
    CaCertificate,
    /// The CA key could not be loaded.
    #[error("cannot load the signing CA key")]
    CaKey(#[source] rcgen::Error),
    /// The CA key is of a kind the signer does not sign with.
    #[error("the signing CA key is of an unsupported kind")]
    UnsupportedKey,
    /// Signing failed.
    #[error("cannot sign the certificate")]
    Sign(#[source] rcgen::Error),
    /// The request could not be read.
    #[error("unable to parse csr {name:?}: {message}")]
    Request {
        /// The request.
        name: String,
        /// Go's message.
        message: String,
    },
    /// The policy refused to issue the certificate (the CA expired, an unknown usage).
    #[error("{0}")]
    Policy(String),
    /// A request to the API server failed.
    #[error("request to the api server failed")]
    Api(#[from] kube::Error),
}

/// A DER element: `tag`, its length, `content`.
fn tlv(tag: u8, content: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    let len = content.len();
    if len < 0x80 {
        out.push(len as u8);
    } else {
        let bytes: Vec<u8> = len
            .to_be_bytes()
            .iter()
            .copied()
            .skip_while(|b| *b == 0)
            .collect();
        out.push(0x80 | bytes.len() as u8);
        out.extend(bytes);
    }
    out.extend_from_slice(content);
    out
}

fn sequence(parts: &[Vec<u8>]) -> Vec<u8> {
    tlv(0x30, &parts.concat())
}

fn oid(dotted: &str) -> Vec<u8> {
    let arcs: Vec<u64> = dotted.split('.').filter_map(|a| a.parse().ok()).collect();
    let mut body = Vec::new();
    if arcs.len() >= 2 {
        let mut push = |mut v: u64| {
            let mut bytes = vec![(v & 0x7f) as u8];
            v >>= 7;
            while v > 0 {
                bytes.push(0x80 | (v & 0x7f) as u8);
                v >>= 7;
            }
            bytes.reverse();
            body.extend(bytes);
        };
        push(arcs[0] * 40 + arcs[1]);
        for arc in &arcs[2..] {
            push(*arc);
        }
    }
    tlv(0x06, &body)
}

/// A positive INTEGER from big-endian magnitude bytes.
fn unsigned_integer(bytes: &[u8]) -> Vec<u8> {
    let mut body: Vec<u8> = bytes.iter().copied().skip_while(|b| *b == 0).collect();
    if body.is_empty() || body[0] & 0x80 != 0 {
        body.insert(0, 0);
    }
    tlv(0x02, &body)
}

/// Go's `isPrintable` as `asn1.Marshal` uses it for strings (no `*`, no `&`).
fn printable(s: &str) -> bool {
    s.bytes().all(|b| {
        b.is_ascii_alphanumeric()
            || (b'\''..=b')').contains(&b)
            || (b'+'..=b'/').contains(&b)
            || matches!(b, b' ' | b':' | b'=' | b'?')
    })
}

/// A string as `asn1.Marshal` writes one without a declared type.
fn go_string(s: &str) -> Vec<u8> {
    tlv(if printable(s) { 0x13 } else { 0x0c }, s.as_bytes())
}

/// The subject as `pkix.Name.ToRDNSequence` writes the name Go parsed from the request: one
/// set per attribute kind, in Go's order, the last common name and serial number only.
fn subject_der(request: &x509::Request) -> Vec<u8> {
    let mut rdns = Vec::new();
    let mut add = |oid_text: &str, values: Vec<String>| {
        if values.is_empty() {
            return;
        }
        let mut members: Vec<Vec<u8>> = values
            .iter()
            .map(|v| sequence(&[oid(oid_text), go_string(v)]))
            .collect();
        members.sort();
        rdns.push(tlv(0x31, &members.concat()));
    };
    for kind in [
        x509::OID_COUNTRY,
        x509::OID_PROVINCE,
        x509::OID_LOCALITY,
        x509::OID_STREET,
        x509::OID_POSTAL_CODE,
        x509::OID_ORGANIZATION,
        x509::OID_ORGANIZATIONAL_UNIT,
    ] {
        add(kind, request.values(kind));
    }
    for kind in [x509::OID_COMMON_NAME, x509::OID_SERIAL_NUMBER] {
        let last: Vec<String> = request.values(kind).pop().into_iter().collect();
        add(kind, last.into_iter().filter(|v| !v.is_empty()).collect());
    }
    sequence(&rdns)
}

/// An extended key usage: Go's `ExtKeyUsage` number (their order) and OID.
type ExtendedUsage = (u8, &'static str);

/// `keyUsagesFromStrings`: the key usage bits and the sorted, distinct extended key usages.
fn usages_of(usages: &[String]) -> Result<(u16, Vec<ExtendedUsage>), Error> {
    let mut bits = 0u16;
    let mut extended: Vec<ExtendedUsage> = Vec::new();
    let mut unknown = Vec::new();
    for usage in usages {
        let bit = match usage.as_str() {
            "signing" | "digital signature" => Some(0),
            "content commitment" => Some(1),
            "key encipherment" => Some(2),
            "data encipherment" => Some(3),
            "key agreement" => Some(4),
            "cert sign" => Some(5),
            "crl sign" => Some(6),
            "encipher only" => Some(7),
            "decipher only" => Some(8),
            _ => None,
        };
        if let Some(bit) = bit {
            bits |= 1 << bit;
            continue;
        }
        // Go's ExtKeyUsage numbering orders them.
        let eku = match usage.as_str() {
            "any" => Some((0, "2.5.29.37.0")),
            "server auth" => Some((1, "1.3.6.1.5.5.7.3.1")),
            "client auth" => Some((2, "1.3.6.1.5.5.7.3.2")),
            "code signing" => Some((3, "1.3.6.1.5.5.7.3.3")),
            "email protection" | "s/mime" => Some((4, "1.3.6.1.5.5.7.3.4")),
            "ipsec end system" => Some((5, "1.3.6.1.5.5.7.3.5")),
            "ipsec tunnel" => Some((6, "1.3.6.1.5.5.7.3.6")),
            "ipsec user" => Some((7, "1.3.6.1.5.5.7.3.7")),
            "timestamping" => Some((8, "1.3.6.1.5.5.7.3.8")),
            "ocsp signing" => Some((9, "1.3.6.1.5.5.7.3.9")),
            "microsoft sgc" => Some((10, "1.3.6.1.4.1.311.10.3.3")),
            "netscape sgc" => Some((11, "2.16.840.1.113730.4.1")),
            _ => None,
        };
        match eku {
            Some(e) if !extended.contains(&e) => extended.push(e),
            Some(_) => {}
            None => unknown.push(format!("{usage:?}")),
        }
    }
    if !unknown.is_empty() {
        return Err(Error::Policy(format!(
            "unrecognized usage values: [{}]",
            unknown.join(" ")
        )));
    }
    extended.sort();
    Ok((bits, extended))
}

fn extension(id: &str, critical: bool, value: &[u8]) -> Vec<u8> {
    let mut parts = vec![oid(id)];
    if critical {
        parts.push(vec![0x01, 0x01, 0xff]);
    }
    parts.push(tlv(0x04, value));
    sequence(&parts)
}

/// Go's `marshalKeyUsage`: the bits reversed into a BIT STRING as short as the last bit.
fn key_usage(bits: u16) -> Vec<u8> {
    let bytes = [
        (bits as u8).reverse_bits(),
        ((bits >> 8) as u8).reverse_bits(),
    ];
    let len = if bytes[1] != 0 { 2 } else { 1 };
    let last = bytes[len - 1];
    let unused = if last == 0 {
        0
    } else {
        last.trailing_zeros() as u8
    };
    let mut body = vec![unused];
    body.extend_from_slice(&bytes[..len]);
    tlv(0x03, &body)
}

/// Go's `marshalSANs`: DNS names, e-mail addresses, IP addresses (IPv4 in four bytes),
/// URIs, in that order.
fn alt_names(request: &x509::Request) -> Vec<u8> {
    let mut names = Vec::new();
    for dns in &request.dns_names {
        names.push(tlv(0x82, dns.as_bytes()));
    }
    for email in &request.email_addresses {
        names.push(tlv(0x81, email.as_bytes()));
    }
    for ip in &request.ip_addresses {
        let bytes = match ip {
            IpAddr::V4(v4) => v4.octets().to_vec(),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => v4.octets().to_vec(),
                None => v6.octets().to_vec(),
            },
        };
        names.push(tlv(0x87, &bytes));
    }
    for uri in &request.uris {
        names.push(tlv(0x86, uri.as_bytes()));
    }
    sequence(&names)
}

/// `time.Time` as `asn1.Marshal` writes it: UTCTime from 1950 to 2049, GeneralizedTime
/// otherwise.
fn asn1_time(unix: i64) -> Vec<u8> {
    use k8s_openapi::jiff::{Timestamp, tz::TimeZone};
    let at = Timestamp::from_second(unix).unwrap_or(Timestamp::UNIX_EPOCH);
    let t = at.to_zoned(TimeZone::UTC);
    let (year, month, day) = (t.year(), t.month(), t.day());
    let (hour, minute, second) = (t.hour(), t.minute(), t.second());
    if (1950..2050).contains(&year) {
        let text = format!(
            "{:02}{month:02}{day:02}{hour:02}{minute:02}{second:02}Z",
            year % 100
        );
        tlv(0x17, text.as_bytes())
    } else {
        let text = format!("{year:04}{month:02}{day:02}{hour:02}{minute:02}{second:02}Z");
        tlv(0x18, text.as_bytes())
    }
}

/// The cluster CA as the signers use it.
pub struct Authority {
    subject: Vec<u8>,
    key_id: Option<Vec<u8>>,
    not_after: i64,
    key: KeyPair,
    algorithm: Vec<u8>,
}

impl std::fmt::Debug for Authority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authority")
            .field("not_after", &self.not_after)
            .finish_non_exhaustive()
    }
}

impl Authority {
    /// Loads a CA.
    ///
    /// # Errors
    /// When its certificate or key cannot be read, or the key is of an unsupported kind.
    pub fn new(ca: &SigningCa) -> Result<Self, Error> {
        let (block, _) = pem::decode(ca.cert_pem.as_bytes()).ok_or(Error::CaCertificate)?;
        let (_, cert) = x509_parser::certificate::X509Certificate::from_der(&block.bytes)
            .map_err(|_| Error::CaCertificate)?;
        let key_id = cert
            .extensions()
            .iter()
            .find_map(|e| match e.parsed_extension() {
                x509_parser::extensions::ParsedExtension::SubjectKeyIdentifier(id) => {
                    Some(id.0.to_vec())
                }
                _ => None,
            });
        let key = KeyPair::from_pem(&ca.key_pem).map_err(Error::CaKey)?;
        let alg = key.algorithm();
        let algorithm = if alg == &rcgen::PKCS_ECDSA_P256_SHA256 {
            sequence(&[oid("1.2.840.10045.4.3.2")])
        } else if alg == &rcgen::PKCS_ECDSA_P384_SHA384 {
            sequence(&[oid("1.2.840.10045.4.3.3")])
        } else if alg == &rcgen::PKCS_RSA_SHA256 {
            sequence(&[oid("1.2.840.113549.1.1.11"), vec![0x05, 0x00]])
        } else if alg == &rcgen::PKCS_ED25519 {
            sequence(&[oid("1.3.101.112")])
        } else {
            return Err(Error::UnsupportedKey);
        };
        Ok(Self {
            subject: cert.tbs_certificate.subject.as_raw().to_vec(),
            key_id,
            not_after: cert.tbs_certificate.validity.not_after.timestamp(),
            key,
            algorithm,
        })
    }

    /// Issues a certificate (DER) for `request` with `usages`, valid from `now` minus five
    /// minutes for `ttl` seconds, as upstream's `PermissiveSigningPolicy` and Go's
    /// `x509.CreateCertificate` make it.
    ///
    /// # Errors
    /// An unknown usage, an expired CA, or a failed signature.
    pub fn sign(
        &self,
        request: &x509::Request,
        usages: &[String],
        ttl: i64,
        now: i64,
    ) -> Result<Vec<u8>, Error> {
        let (bits, extended) = usages_of(usages)?;
        let not_before = now - BACKDATE;
        let mut not_after = if ttl < SHORT {
            now + ttl
        } else {
            now + ttl - BACKDATE
        };
        if not_after >= self.not_after {
            not_after = self.not_after;
        }
        if not_before >= self.not_after {
            return Err(Error::Policy(format!(
                "the signer has expired: NotAfter={}",
                self.not_after
            )));
        }
        if now >= self.not_after {
            return Err(Error::Policy(format!(
                "refusing to sign a certificate that expired in the past: NotAfter={}",
                self.not_after
            )));
        }
        let subject = subject_der(request);
        let mut extensions = Vec::new();
        if bits != 0 {
            extensions.push(extension("2.5.29.15", true, &key_usage(bits)));
        }
        if !extended.is_empty() {
            let ids: Vec<Vec<u8>> = extended.iter().map(|(_, id)| oid(id)).collect();
            extensions.push(extension("2.5.29.37", false, &sequence(&ids)));
        }
        extensions.push(extension("2.5.29.19", true, &sequence(&[])));
        if let Some(id) = &self.key_id
            && self.subject != subject
        {
            extensions.push(extension("2.5.29.35", false, &sequence(&[tlv(0x80, id)])));
        }
        let has_names = !(request.dns_names.is_empty()
            && request.email_addresses.is_empty()
            && request.ip_addresses.is_empty()
            && request.uris.is_empty());
        if has_names {
            let empty_subject = subject == [0x30, 0x00];
            extensions.push(extension("2.5.29.17", empty_subject, &alt_names(request)));
        }
        let mut serial = [0u8; 16];
        while serial.iter().all(|b| *b == 0) {
            rand::fill(&mut serial);
        }
        let tbs = sequence(&[
            tlv(0xa0, &[0x02, 0x01, 0x02]),
            unsigned_integer(&serial),
            self.algorithm.clone(),
            self.subject.clone(),
            sequence(&[asn1_time(not_before), asn1_time(not_after)]),
            subject,
            request.public_key_info.clone(),
            tlv(0xa3, &sequence(&extensions)),
        ]);
        let signature = self.key.sign(&tbs).map_err(Error::Sign)?;
        let mut bit_string = vec![0];
        bit_string.extend(signature);
        Ok(sequence(&[
            tbs,
            self.algorithm.clone(),
            tlv(0x03, &bit_string),
        ]))
    }
}

/// The distinct usages, sorted (`sets.String`).
fn usage_set(usages: &[String]) -> Vec<&str> {
    let mut set: Vec<&str> = usages.iter().map(String::as_str).collect();
    set.sort_unstable();
    set.dedup();
    set
}

fn same_set(usages: &[String], expected: &[&str]) -> bool {
    let mut expected = expected.to_vec();
    expected.sort_unstable();
    usage_set(usages) == expected
}

/// Whether `signer` issues for this request (`isRequestForSignerFn`): `Ok(false)` for a
/// signer it does not run, an error (the Failed condition's message) for a request it must
/// refuse.
pub fn recognize(signer: &str, request: &x509::Request, usages: &[String]) -> Result<bool, String> {
    let nodes = || request.organizations() == ["system:nodes"];
    let node_name = || request.common_name().starts_with("system:node:");
    match signer {
        certificates::KUBELET_SERVING => {
            if !nodes() {
                return Err("subject organization is not system:nodes".into());
            }
            if request.dns_names.is_empty() && request.ip_addresses.is_empty() {
                return Err("DNS or IP subjectAltName is required".into());
            }
            if !request.email_addresses.is_empty() {
                return Err("Email subjectAltNames are not allowed".into());
            }
            if !request.uris.is_empty() {
                return Err("URI subjectAltNames are not allowed".into());
            }
            let full = ["digital signature", "key encipherment", "server auth"];
            if !same_set(usages, &full) && !same_set(usages, &["digital signature", "server auth"])
            {
                return Err(format!("usages did not match [{}]", full.join(" ")));
            }
            if !node_name() {
                return Err("subject common name does not begin with system:node:".into());
            }
            Ok(true)
        }
        certificates::KUBE_APISERVER_CLIENT_KUBELET => {
            if !nodes() {
                return Err("subject organization is not system:nodes".into());
            }
            if !request.dns_names.is_empty() {
                return Err("DNS subjectAltNames are not allowed".into());
            }
            if !request.email_addresses.is_empty() {
                return Err("Email subjectAltNames are not allowed".into());
            }
            if !request.ip_addresses.is_empty() {
                return Err("IP subjectAltNames are not allowed".into());
            }
            if !request.uris.is_empty() {
                return Err("URI subjectAltNames are not allowed".into());
            }
            if !node_name() {
                return Err("subject common name does not begin with system:node:".into());
            }
            let full = ["client auth", "digital signature", "key encipherment"];
            if !same_set(usages, &full) && !same_set(usages, &["client auth", "digital signature"])
            {
                return Err(format!("usages did not match [{}]", full.join(" ")));
            }
            Ok(true)
        }
        certificates::KUBE_APISERVER_CLIENT => {
            let mut client_auth = false;
            for usage in usages {
                match usage.as_str() {
                    "digital signature" | "key encipherment" => {}
                    "client auth" => client_auth = true,
                    other => return Err(format!("invalid usage for client certificate: {other}")),
                }
            }
            if !client_auth {
                return Err("missing required usage for client certificate: client auth".into());
            }
            Ok(true)
        }
        certificates::LEGACY_UNKNOWN => Ok(true),
        _ => Ok(false),
    }
}

/// How long a certificate lasts (`signer.duration`): the requested `expirationSeconds`
/// within ten minutes and `max`, else `max`.
pub fn duration(expiration_seconds: Option<i32>, max: Duration) -> i64 {
    let max = max.as_secs() as i64;
    match expiration_seconds {
        None => max,
        Some(s) => i64::from(s).clamp(MINIMUM.min(max), max),
    }
}

fn has_condition(csr: &CertificateSigningRequest, kind: &str) -> bool {
    csr.status
        .iter()
        .flat_map(|s| s.conditions.iter().flatten())
        .any(|c| c.type_ == kind)
}

/// Approved and not Denied (`IsCertificateRequestApproved`), and not Failed.
fn ready_to_sign(csr: &CertificateSigningRequest) -> bool {
    let failed = csr
        .status
        .iter()
        .flat_map(|s| s.conditions.iter().flatten())
        .any(|c| c.type_ == "Failed" && (c.status.is_empty() || c.status == "True"));
    has_condition(csr, "Approved") && !has_condition(csr, "Denied") && !failed
}

/// One sync of one request (`signer.handle` behind `CertificateController.syncFunc`).
async fn sync(
    api: &Api<CertificateSigningRequest>,
    authority: &Authority,
    max: Duration,
    csr: &CertificateSigningRequest,
) -> Result<(), Error> {
    let issued = csr
        .status
        .as_ref()
        .and_then(|s| s.certificate.as_ref())
        .is_some_and(|c| !c.0.is_empty());
    if issued || !ready_to_sign(csr) || !SIGNERS.contains(&csr.spec.signer_name.as_str()) {
        return Ok(());
    }
    let name = csr.metadata.name.clone().unwrap_or_default();
    let request =
        x509::parse_request_pem(&csr.spec.request.0, false).map_err(|message| Error::Request {
            name: name.clone(),
            message,
        })?;
    let usages = csr.spec.usages.clone().unwrap_or_default();
    let mut csr = csr.clone();
    let status = csr.status.get_or_insert_with(Default::default);
    match recognize(&csr.spec.signer_name, &request, &usages) {
        Err(message) => {
            status.conditions.get_or_insert_with(Vec::new).push(
                CertificateSigningRequestCondition {
                    type_: "Failed".into(),
                    status: "True".into(),
                    reason: Some("SignerValidationFailure".into()),
                    message: Some(message),
                    last_update_time: Some(super::support::now()),
                    ..Default::default()
                },
            );
        }
        Ok(false) => return Ok(()),
        Ok(true) => {
            // `authority.Sign` parses the request again and checks its signature.
            x509::parse_request(&request.der, true).map_err(|message| {
                Error::Policy(format!(
                    "unable to verify certificate request signature: {message}"
                ))
            })?;
            let now = k8s_openapi::jiff::Timestamp::now().as_second();
            let ttl = duration(csr.spec.expiration_seconds, max);
            let der = authority.sign(&request, &usages, ttl, now)?;
            status.certificate = Some(ByteString(pem::encode("CERTIFICATE", &der).into_bytes()));
        }
    }
    api.replace_status(&name, &PostParams::default(), &csr)
        .await?;
    Ok(())
}

/// Starts the signers: every request that becomes approved is signed with `ca`, for at most
/// `max` (`--cluster-signing-duration`).
///
/// # Errors
/// When the CA cannot be loaded.
pub(crate) fn start(
    client: kube::Client,
    ca: &SigningCa,
    max: Duration,
) -> Result<AbortOnDrop, Error> {
    let authority = Arc::new(Authority::new(ca)?);
    let requests = Cache::<CertificateSigningRequest>::new();
    let queue = Arc::new(Queue::<String>::new());
    let q = queue.clone();
    requests.subscribe(move |change| {
        if let Change::Applied { new, .. } = change {
            q.add(new.metadata.name.clone().unwrap_or_default());
        }
    });
    let api: Api<CertificateSigningRequest> = Api::all(client);
    let watch = super::informer::spawn(api.clone(), watcher::Config::default(), requests.clone());
    Ok(AbortOnDrop::spawn(async move {
        let _watch = watch;
        requests.wait_ready().await;
        loop {
            let name = queue.next().await;
            let result = match requests.get("", &name) {
                Some(csr) => sync(&api, &authority, max, &csr).await,
                None => Ok(()),
            };
            match result {
                Ok(()) => queue.forget(&name),
                Err(error) => {
                    tracing::debug!(csr = %name, error = %super::support::error_chain(&error), "certificate signing failed; retrying");
                    queue.add_rate_limited(name.clone());
                }
            }
            queue.done(&name);
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ca() -> SigningCa {
        let key = KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::default();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let cert = params.self_signed(&key).unwrap();
        SigningCa {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        }
    }

    fn request(subject: &[(rcgen::DnType, &str)], names: Vec<String>) -> x509::Request {
        let mut params = rcgen::CertificateParams::new(names).unwrap();
        params.distinguished_name = rcgen::DistinguishedName::new();
        for (kind, value) in subject {
            params.distinguished_name.push(kind.clone(), *value);
        }
        let key = KeyPair::generate().unwrap();
        let pem_text = params.serialize_request(&key).unwrap().pem().unwrap();
        x509::parse_request_pem(pem_text.as_bytes(), true).unwrap()
    }

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn an_issued_certificate_carries_the_requested_names_usages_and_validity() {
        let ca = ca();
        let authority = Authority::new(&ca).unwrap();
        let request = request(
            &[
                (rcgen::DnType::CommonName, "system:node:a"),
                (rcgen::DnType::OrganizationName, "system:nodes"),
            ],
            strings(&["a.example", "10.0.0.7"]),
        );
        let usages = strings(&["server auth", "digital signature", "key encipherment"]);
        let der = authority
            .sign(&request, &usages, 900, 1_700_000_000)
            .unwrap();
        let pem_text = pem::encode("CERTIFICATE", &der);
        let request_pem = pem::encode("CERTIFICATE REQUEST", &request.der);
        let summary =
            x509::describe_issued(pem_text.as_bytes(), &ca.cert_pem, request_pem.as_bytes());
        assert_eq!(summary["signed by the cluster CA"], true, "{summary}");
        assert_eq!(summary["issuer is the cluster CA"], true);
        assert_eq!(summary["public key is the request's"], true);
        assert_eq!(summary["validity in seconds"], 1200);
        assert_eq!(
            summary["extended key usages"],
            serde_json::json!(["server auth"])
        );
        assert_eq!(
            summary["subject alternative names"],
            serde_json::json!(["DNS:a.example", "IP:10.0.0.7"])
        );
        // Go's order: O before CN, whatever the request's.
        assert_eq!(summary["subject"][0][0]["type"], "2.5.4.10");
        assert_eq!(summary["subject"][1][0]["value"], "system:node:a");
        let oids: Vec<&str> = summary["extensions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["oid"].as_str().unwrap())
            .collect();
        assert_eq!(
            oids,
            [
                "2.5.29.15",
                "2.5.29.37",
                "2.5.29.19",
                "2.5.29.35",
                "2.5.29.17"
            ]
        );
        assert_eq!(summary["extensions"][3]["key identifier is the CA's"], true);
    }

    #[test]
    fn long_certificates_end_five_minutes_early_and_never_outlive_the_ca() {
        let authority = Authority::new(&ca()).unwrap();
        let request = request(&[(rcgen::DnType::CommonName, "x")], vec![]);
        let usages = strings(&["client auth"]);
        let year = 365 * 24 * 3600;
        let der = authority
            .sign(&request, &usages, year, 1_700_000_000)
            .unwrap();
        let (_, cert) = x509_parser::certificate::X509Certificate::from_der(&der).unwrap();
        let validity = &cert.tbs_certificate.validity;
        assert_eq!(
            validity.not_after.timestamp() - validity.not_before.timestamp(),
            year
        );
        // rcgen's default CA ends in 4096: its certificates use GeneralizedTime past 2049.
        let der = authority
            .sign(&request, &usages, 100 * year, 2_500_000_000)
            .unwrap();
        assert!(x509_parser::certificate::X509Certificate::from_der(&der).is_ok());
    }

    #[test]
    fn key_usages_are_encoded_as_go_encodes_them() {
        assert_eq!(key_usage(0b101), vec![0x03, 0x02, 0x05, 0xa0]);
        assert_eq!(key_usage(1 << 8), vec![0x03, 0x03, 0x07, 0x00, 0x80]);
        let (bits, extended) =
            usages_of(&strings(&["signing", "s/mime", "email protection", "any"])).unwrap();
        assert_eq!(bits, 1);
        assert_eq!(extended, vec![(0, "2.5.29.37.0"), (4, "1.3.6.1.5.5.7.3.4")]);
    }

    #[test]
    fn each_signer_refuses_what_upstream_refuses() {
        let node = request(
            &[
                (rcgen::DnType::OrganizationName, "system:nodes"),
                (rcgen::DnType::CommonName, "system:node:a"),
            ],
            vec![],
        );
        assert_eq!(
            recognize(
                certificates::KUBELET_SERVING,
                &node,
                &strings(&["server auth"])
            ),
            Err("DNS or IP subjectAltName is required".into())
        );
        assert_eq!(
            recognize(
                certificates::KUBE_APISERVER_CLIENT_KUBELET,
                &node,
                &strings(&["client auth"])
            ),
            Err("usages did not match [client auth digital signature key encipherment]".into())
        );
        assert_eq!(
            recognize(
                certificates::KUBE_APISERVER_CLIENT,
                &node,
                &strings(&["server auth"])
            ),
            Err("invalid usage for client certificate: server auth".into())
        );
        assert_eq!(
            recognize(
                certificates::KUBE_APISERVER_CLIENT,
                &node,
                &strings(&["key encipherment"])
            ),
            Err("missing required usage for client certificate: client auth".into())
        );
        assert_eq!(recognize("example.com/other", &node, &[]), Ok(false));
    }

    #[test]
    fn a_requested_duration_is_held_between_ten_minutes_and_the_maximum() {
        let max = Duration::from_secs(8760 * 3600);
        assert_eq!(duration(None, max), 8760 * 3600);
        assert_eq!(duration(Some(60), max), 600);
        assert_eq!(duration(Some(3600), max), 3600);
        assert_eq!(duration(Some(i32::MAX), max), 8760 * 3600);
    }
}

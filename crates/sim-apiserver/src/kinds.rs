//! Validation of the built-in kinds that only the generic path of the registry serves (no
//! strategy of their own here): the checks of kube-apiserver 1.34's
//! `pkg/apis/*/validation` that operators' objects most often fail, with the real field
//! paths and messages. Metadata is checked for every kind by
//! [`super::objects::validate`]; [`validate`] adds these causes after it.
//!
//! # Caveats
//! Each kind has the few checks its differential interaction compares (an invalid enum
//! value, a required field, a bound), not the whole of its upstream validation: an object
//! the real server refuses for another reason is accepted here.

use std::net::IpAddr;

use serde_json::Value;

use super::names::{self, Cause};
use super::registry::ResourceType;

/// The causes of an object of a kind listed here beyond its metadata; none for others.
/// `old` is the stored object an update replaces.
pub fn validate(rt: &ResourceType, obj: &Value, old: Option<&Value>) -> Vec<Cause> {
    let mut causes = Vec::new();
    match (rt.group.as_str(), rt.resource.as_str()) {
        ("batch", "cronjobs") => {
            validate_cron_job(&obj["spec"], old.map(|o| &o["spec"]), &mut causes);
        }
        ("events.k8s.io", "events") => {
            if let Some(old) = old {
                validate_event_update(obj, old, &mut causes);
            }
        }
        ("", "services") => causes.extend(super::services::validate(obj)),
        // An update that leaves the subsets as they were is not refused for them.
        ("", "endpoints") if old.is_none_or(|o| o["subsets"] != obj["subsets"]) => {
            validate_endpoint_subsets(&obj["subsets"], &mut causes);
        }
        ("discovery.k8s.io", "endpointslices") => {
            one_of(obj, "addressType", &["FQDN", "IPv4", "IPv6"], &mut causes);
        }
        ("", "persistentvolumeclaims") if list_is_empty(&obj["spec"]["accessModes"]) => {
            causes.push(Cause::required(
                "spec.accessModes",
                "at least 1 access mode is required",
            ));
        }
        ("", "persistentvolumes") => {
            let capacity = &obj["spec"]["capacity"];
            if capacity.as_object().is_none_or(|c| c.is_empty()) {
                causes.push(Cause::required("spec.capacity", ""));
            }
            if capacity
                .as_object()
                .is_none_or(|c| !c.contains_key("storage"))
            {
                // A missing map prints as an empty one.
                let shown = match capacity {
                    Value::Null => Value::Object(Default::default()),
                    other => other.clone(),
                };
                causes.push(Cause::not_supported(
                    "spec.capacity",
                    shown,
                    &["storage".to_string()],
                ));
            }
        }
        ("policy", "poddisruptionbudgets") => {
            for field in ["minAvailable", "maxUnavailable"] {
                if let Some(n) = obj["spec"][field].as_i64().filter(|n| *n < 0) {
                    causes.push(Cause::invalid(
                        &format!("spec.{field}"),
                        n.into(),
                        "must be greater than or equal to 0",
                    ));
                }
            }
        }
        ("networking.k8s.io", "ingresses") => validate_ingress(obj, &mut causes),
        ("networking.k8s.io", "networkpolicies") => {
            for direction in ["ingress", "egress"] {
                for (i, rule) in items(&obj["spec"][direction]) {
                    for (j, port) in items(&rule["ports"]) {
                        let at = format!("spec.{direction}[{i}].ports[{j}]");
                        one_of(port, "protocol", PROTOCOLS, &mut causes).at(&at);
                    }
                }
            }
        }
        (
            "admissionregistration.k8s.io",
            "validatingwebhookconfigurations" | "mutatingwebhookconfigurations",
        ) => {
            for (i, webhook) in items(&obj["webhooks"]) {
                let at = format!("webhooks[{i}]");
                if list_is_empty(&webhook["admissionReviewVersions"]) {
                    causes.push(Cause::required(
                        &format!("{at}.admissionReviewVersions"),
                        "must specify one of v1, v1beta1",
                    ));
                }
                one_of(
                    webhook,
                    "sideEffects",
                    &["None", "NoneOnDryRun"],
                    &mut causes,
                )
                .at(&at);
                one_of(webhook, "failurePolicy", FAILURE_POLICIES, &mut causes).at(&at);
                causes.extend(super::admission_webhooks::match_condition_causes(
                    &webhook["matchConditions"],
                    &format!("{at}.matchConditions"),
                    super::cel::Declarations {
                        authorizer: true,
                        ..super::cel::Declarations::default()
                    },
                ));
            }
        }
        ("admissionregistration.k8s.io", "validatingadmissionpolicies") => {
            one_of(&obj["spec"], "failurePolicy", FAILURE_POLICIES, &mut causes).at("spec");
            causes.extend(super::admission_policy::policy_causes(obj));
        }
        ("admissionregistration.k8s.io", "validatingadmissionpolicybindings") => {
            causes.extend(super::admission_policy::binding_causes(obj));
        }
        ("scheduling.k8s.io", "priorityclasses") => {
            let name = obj["metadata"]["name"].as_str().unwrap_or_default();
            let value = obj["value"].as_i64().unwrap_or_default();
            if !name.starts_with("system-") && value > HIGHEST_USER_DEFINED_PRIORITY {
                causes.push(Cause::forbidden(
                    "value",
                    format!(
                        "maximum allowed value of a user defined priority is {HIGHEST_USER_DEFINED_PRIORITY}"
                    ),
                ));
            }
        }
        ("storage.k8s.io", "storageclasses") => {
            if obj["provisioner"].as_str().is_none_or(str::is_empty) {
                causes.push(Cause::required("provisioner", ""));
            }
            validate_allowed_topologies(&obj["allowedTopologies"], &mut causes);
        }
        ("storage.k8s.io", "volumeattributesclasses") => {
            if obj["driverName"].as_str().is_none_or(str::is_empty) {
                causes.push(Cause::required("driverName", ""));
            }
            if obj["parameters"].as_object().is_none_or(|p| p.is_empty()) {
                causes.push(Cause::required(
                    "parameters",
                    "must contain at least one key/value pair",
                ));
            }
        }
        ("autoscaling", "horizontalpodautoscalers") => {
            let spec = &obj["spec"];
            let max = spec["maxReplicas"].as_i64().unwrap_or_default();
            let min = spec["minReplicas"].as_i64().unwrap_or(1);
            if max < 1 {
                causes.push(Cause::invalid(
                    "spec.maxReplicas",
                    max.into(),
                    "must be greater than 0",
                ));
            }
            if max < min {
                causes.push(Cause::invalid(
                    "spec.maxReplicas",
                    max.into(),
                    "must be greater than or equal to `minReplicas`",
                ));
            }
        }
        _ => {}
    }
    causes
}

/// `scheduling.HighestUserDefinablePriority`.
const HIGHEST_USER_DEFINED_PRIORITY: i64 = 1_000_000_000;

const PROTOCOLS: &[&str] = &["TCP", "UDP", "SCTP"];

const FAILURE_POLICIES: &[&str] = &["Fail", "Ignore"];

/// `validateCronJobSpec`'s checks of the schedule's presence, syntax (on every write, an
/// unchanged schedule too) and `TZ`, and of `timeZone` (only when it changes, as upstream
/// revalidates it).
fn validate_cron_job(spec: &Value, old: Option<&Value>, causes: &mut Vec<Cause>) {
    let schedule = spec["schedule"].as_str().unwrap_or_default();
    let zone = spec.get("timeZone").filter(|z| !z.is_null());
    if schedule.is_empty() {
        causes.push(Cause::required("spec.schedule", ""));
    } else if let Err(refusal) = super::cron_schedule::check(schedule) {
        causes.push(Cause::invalid(
            "spec.schedule",
            schedule.into(),
            refusal.to_string(),
        ));
    }
    if schedule.contains("TZ") {
        // A schedule that already had a `TZ` may keep one, but not beside `timeZone`.
        let had_tz = old.is_some_and(|o| o["schedule"].as_str().is_some_and(|s| s.contains("TZ")));
        let detail = match (had_tz, zone) {
            (false, _) => Some("cannot use TZ or CRON_TZ in schedule, use timeZone field instead"),
            (true, Some(_)) => Some("cannot use both timeZone field and TZ or CRON_TZ in schedule"),
            (true, None) => None,
        };
        if let Some(detail) = detail {
            causes.push(Cause::invalid("spec.schedule", schedule.into(), detail));
        }
    }
    let old_zone = old.and_then(|o| o.get("timeZone")).filter(|z| !z.is_null());
    if let Some(zone) = zone
        && (old.is_none() || old_zone != Some(zone))
    {
        causes.extend(time_zone_causes(zone.as_str().unwrap_or_default()));
    }
}

/// `validateTimeZone`: a name of IANA's rules (each part 1-14 letters, digits, `.`, `-`, `_`
/// or `+`, not `.`, `..` or starting with `-`), not `Local`, that the zone database has.
fn time_zone_causes(zone: &str) -> Vec<Cause> {
    const AT: &str = "spec.timeZone";
    if zone.is_empty() {
        return vec![Cause::invalid(
            AT,
            zone.into(),
            "timeZone must be nil or non-empty string",
        )];
    }
    let valid_part = |part: &str| {
        (1..=14).contains(&part.len())
            && part
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | '+'))
            && part != "."
            && part != ".."
            && !part.starts_with('-')
    };
    if !zone.split('/').all(valid_part) {
        return vec![Cause::invalid(
            AT,
            zone.into(),
            format!("unknown time zone {zone}"),
        )];
    }
    let mut causes = Vec::new();
    if zone.eq_ignore_ascii_case("Local") {
        causes.push(Cause::invalid(
            AT,
            zone.into(),
            "timeZone must be an explicit time zone as defined in https://www.iana.org/time-zones",
        ));
    }
    if let Err(error) = super::time_zone::load(zone) {
        causes.push(Cause::invalid(AT, zone.into(), error.to_string()));
    }
    causes
}

/// `validateEndpointSubsets`: each subset has addresses, each address a usable IP, a DNS
/// label for a hostname and a DNS subdomain for a node name; each port a name (when there
/// are several), a number in range, a protocol and a qualified `appProtocol`.
fn validate_endpoint_subsets(subsets: &Value, causes: &mut Vec<Cause>) {
    for (i, subset) in items(subsets) {
        let at = format!("subsets[{i}]");
        if list_is_empty(&subset["addresses"]) && list_is_empty(&subset["notReadyAddresses"]) {
            causes.push(Cause::required(
                &at,
                "must specify `addresses` or `notReadyAddresses`",
            ));
        }
        for list in ["addresses", "notReadyAddresses"] {
            for (j, address) in items(&subset[list]) {
                validate_endpoint_address(address, &format!("{at}.{list}[{j}]"), causes);
            }
        }
        let require_name = subset["ports"].as_array().is_some_and(|p| p.len() > 1);
        for (j, port) in items(&subset["ports"]) {
            let at = format!("{at}.ports[{j}]");
            let name = port["name"].as_str().unwrap_or_default();
            if require_name && name.is_empty() {
                causes.push(Cause::required(&format!("{at}.name"), ""));
            } else if !name.is_empty() {
                for message in names::dns1123_label(name) {
                    causes.push(Cause::invalid(&format!("{at}.name"), name.into(), message));
                }
            }
            let number = port["port"].as_i64().unwrap_or_default();
            if !(1..=65535).contains(&number) {
                causes.push(Cause::invalid(
                    &format!("{at}.port"),
                    number.into(),
                    "must be between 1 and 65535, inclusive",
                ));
            }
            match port["protocol"].as_str().unwrap_or_default() {
                "" => causes.push(Cause::required(&format!("{at}.protocol"), "")),
                protocol if !PROTOCOLS.contains(&protocol) => {
                    let mut sorted: Vec<String> = PROTOCOLS.iter().map(|p| p.to_string()).collect();
                    sorted.sort();
                    causes.push(Cause::not_supported(
                        &format!("{at}.protocol"),
                        protocol.into(),
                        &sorted,
                    ));
                }
                _ => {}
            }
            if let Some(protocol) = port["appProtocol"].as_str() {
                for message in names::label_key(protocol) {
                    causes.push(Cause::invalid(
                        &format!("{at}.appProtocol"),
                        protocol.into(),
                        message,
                    ));
                }
            }
        }
    }
}

/// `validateEndpointAddress`: the IP (`IsValidIPForLegacyField`, then `ValidateEndpointIP`'s
/// refusal of unspecified, loopback and link-local addresses), the hostname, the node name.
fn validate_endpoint_address(address: &Value, at: &str, causes: &mut Vec<Cause>) {
    let ip_at = format!("{at}.ip");
    let text = address["ip"].as_str().unwrap_or_default();
    let ip = parse_ip_sloppy(text);
    if ip.is_none() {
        causes.push(Cause::invalid(
            &ip_at,
            text.into(),
            "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)",
        ));
    }
    if let Some(hostname) = address["hostname"].as_str().filter(|h| !h.is_empty()) {
        for message in names::dns1123_label(hostname) {
            causes.push(Cause::invalid(
                &format!("{at}.hostname"),
                hostname.into(),
                message,
            ));
        }
    }
    if let Some(node) = address["nodeName"].as_str() {
        for message in names::dns1123_subdomain(node) {
            causes.push(Cause::invalid(
                &format!("{at}.nodeName"),
                node.into(),
                message,
            ));
        }
    }
    let Some(ip) = ip else {
        causes.push(Cause::invalid(
            &ip_at,
            text.into(),
            "must be a valid IP address",
        ));
        return;
    };
    // Go looks at an IPv4-mapped IPv6 address as the IPv4 address it maps.
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    };
    let (unspecified, loopback, link_local, link_local_multicast) = match ip {
        IpAddr::V4(v4) => (
            v4.is_unspecified(),
            v4.is_loopback(),
            v4.is_link_local(),
            v4.octets()[..3] == [224, 0, 0],
        ),
        IpAddr::V6(v6) => (
            v6.is_unspecified(),
            v6.is_loopback(),
            v6.segments()[0] & 0xffc0 == 0xfe80,
            v6.octets()[0] == 0xff && v6.octets()[1] & 0x0f == 0x02,
        ),
    };
    let mut refuse = |detail: String| causes.push(Cause::invalid(&ip_at, text.into(), detail));
    if unspecified {
        refuse(format!("may not be unspecified ({text})"));
    }
    if loopback {
        refuse("may not be in the loopback range (127.0.0.0/8, ::1/128)".into());
    }
    if link_local {
        refuse("may not be in the link-local range (169.254.0.0/16, fe80::/10)".into());
    }
    if link_local_multicast {
        refuse("may not be in the link-local multicast range (224.0.0.0/24, ff02::/10)".into());
    }
}

/// An IP address as `netutils.ParseIPSloppy` reads it: IPv4 octets may have leading zeros.
fn parse_ip_sloppy(text: &str) -> Option<IpAddr> {
    if let Ok(ip) = text.parse::<IpAddr>() {
        return Some(ip);
    }
    let octets: Vec<u8> = text
        .split('.')
        .map(|part| {
            (!part.is_empty() && part.len() <= 3 && part.bytes().all(|b| b.is_ascii_digit()))
                .then(|| part.parse::<u8>().ok())
                .flatten()
        })
        .collect::<Option<_>>()?;
    let octets: [u8; 4] = octets.try_into().ok()?;
    Some(IpAddr::V4(octets.into()))
}

/// `validateAllowedTopologies`: each term's label requirements have values, none twice, and
/// a qualified key, no key twice in a term, and no term repeats another (the same keys with
/// the same sets of values).
fn validate_allowed_topologies(terms: &Value, causes: &mut Vec<Cause>) {
    type Term = std::collections::BTreeMap<String, std::collections::BTreeSet<String>>;
    let mut seen: Vec<Term> = Vec::new();
    for (i, term) in items(terms) {
        let mut expressions = Term::new();
        for (j, requirement) in items(&term["matchLabelExpressions"]) {
            let at = format!("allowedTopologies[{i}].matchLabelExpressions[{j}]");
            let mut values = std::collections::BTreeSet::new();
            if list_is_empty(&requirement["values"]) {
                causes.push(Cause::required(&format!("{at}.values"), ""));
            }
            for (k, value) in items(&requirement["values"]) {
                let value = value.as_str().unwrap_or_default().to_string();
                if !values.insert(value.clone()) {
                    causes.push(Cause::duplicate(&format!("{at}.values[{k}]"), value.into()));
                }
            }
            let key = requirement["key"].as_str().unwrap_or_default();
            for message in names::label_key(key) {
                causes.push(Cause::invalid(&format!("{at}.key"), key.into(), message));
            }
            if expressions.contains_key(key) {
                causes.push(Cause::duplicate(&format!("{at}.key"), key.into()));
            }
            expressions.insert(key.to_string(), values);
        }
        if seen.contains(&expressions) {
            causes.push(Cause::duplicate(
                &format!("allowedTopologies[{i}].matchLabelExpressions"),
                "".into(),
            ));
        }
        seen.push(expressions);
    }
}

fn validate_ingress(obj: &Value, causes: &mut Vec<Cause>) {
    for (i, rule) in items(&obj["spec"]["rules"]) {
        for (j, path) in items(&rule["http"]["paths"]) {
            let at = format!("spec.rules[{i}].http.paths[{j}]");
            match path["pathType"].as_str() {
                None => causes.push(Cause::required(
                    &format!("{at}.pathType"),
                    "pathType must be specified",
                )),
                Some(_) => {
                    one_of(
                        path,
                        "pathType",
                        &["Exact", "ImplementationSpecific", "Prefix"],
                        causes,
                    )
                    .at(&at);
                }
            }
        }
    }
}

fn items(list: &Value) -> impl Iterator<Item = (usize, &Value)> {
    list.as_array().into_iter().flatten().enumerate()
}

/// `ValidateEventUpdate`'s strict checks of an update through events.k8s.io/v1 (not core
/// `v1`, which keeps the legacy rules): what the Event says is immutable, compared in the
/// stored (core) form and named by its core fields, as upstream names them. A reference and
/// a source are shown as `json.Marshal` shows the internal Go structs, which have no JSON
/// names.
///
/// # Caveats
/// The timestamps, `eventTime`, `related` and the checks of a changed `series` are not
/// compared.
fn validate_event_update(new: &Value, old: &Value, causes: &mut Vec<Cause>) {
    use EventFieldShape::{Number, Reference, Source, Text};
    let fields = [
        ("involvedObject", Reference),
        ("reason", Text),
        ("message", Text),
        ("source", Source),
        ("count", Number),
        ("type", Text),
        ("action", Text),
        ("reportingComponent", Text),
        ("reportingInstance", Text),
    ];
    for (field, shape) in fields {
        let (was, is) = (shape.shown(&old[field]), shape.shown(&new[field]));
        if was != is {
            // Upstream names the core field `reportingController`, as its Go field.
            let path = match field {
                "reportingComponent" => "reportingController",
                other => other,
            };
            causes.push(Cause::invalid(path, is, "field is immutable"));
        }
    }
}

/// How the internal Go type of an Event's field is shown as a bad value.
#[derive(Clone, Copy)]
enum EventFieldShape {
    /// A string (empty when missing).
    Text,
    /// An `int32` (0 when missing).
    Number,
    /// A `core.ObjectReference`: every field, under its Go name.
    Reference,
    /// A `core.EventSource`: every field, under its Go name.
    Source,
}

impl EventFieldShape {
    fn shown(self, value: &Value) -> Value {
        let text = |key: &str| Value::String(value[key].as_str().unwrap_or_default().to_owned());
        match self {
            Self::Text => Value::String(value.as_str().unwrap_or_default().to_owned()),
            Self::Number => serde_json::json!(value.as_i64().unwrap_or_default()),
            Self::Reference => serde_json::json!({
                "Kind": text("kind"), "Namespace": text("namespace"), "Name": text("name"),
                "UID": text("uid"), "APIVersion": text("apiVersion"),
                "ResourceVersion": text("resourceVersion"), "FieldPath": text("fieldPath"),
            }),
            Self::Source => {
                serde_json::json!({"Component": text("component"), "Host": text("host")})
            }
        }
    }
}

fn list_is_empty(list: &Value) -> bool {
    list.as_array().is_none_or(Vec::is_empty)
}

/// Where [`one_of`] put its cause, if any, so that the caller can prefix its field path.
struct Pushed<'c> {
    cause: Option<&'c mut Cause>,
}

impl Pushed<'_> {
    /// Prefixes the pushed cause's field with `prefix.`.
    fn at(self, prefix: &str) {
        if let Some(cause) = self.cause {
            cause.field = format!("{prefix}.{}", cause.field);
        }
    }
}

/// A `NotSupported` cause when the string at `field` of `obj` is set and not one of
/// `supported`.
fn one_of<'c>(
    obj: &Value,
    field: &str,
    supported: &[&str],
    causes: &'c mut Vec<Cause>,
) -> Pushed<'c> {
    match obj[field].as_str() {
        Some(value) if !supported.contains(&value) => {
            let supported: Vec<String> = supported.iter().map(|s| s.to_string()).collect();
            causes.push(Cause::not_supported(field, value.into(), &supported));
            Pushed {
                cause: causes.last_mut(),
            }
        }
        _ => Pushed { cause: None },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::Registry;
    use serde_json::json;

    fn messages(group: &str, version: &str, resource: &str, obj: Value) -> Vec<String> {
        let registry = Registry::new();
        let rt = registry.lookup(group, version, resource).unwrap();
        validate(rt, &obj, None)
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn a_cron_job_time_zone_is_refused_unless_the_zone_database_has_it_by_that_exact_name() {
        let cron_job = |zone: &str| json!({"spec": {"schedule": "0 * * * *", "timeZone": zone}});
        let of = |zone: &str| messages("batch", "v1", "cronjobs", cron_job(zone));
        assert!(of("Europe/Paris").is_empty());
        assert!(of("Local").len() == 1);
        assert_eq!(
            of("local"),
            [
                r#"spec.timeZone: Invalid value: "local": timeZone must be an explicit time zone as defined in https://www.iana.org/time-zones"#,
                r#"spec.timeZone: Invalid value: "local": unknown time zone local"#,
            ]
        );
        assert_eq!(
            of("Europe/../Paris"),
            [
                r#"spec.timeZone: Invalid value: "Europe/../Paris": unknown time zone Europe/../Paris"#
            ]
        );
        assert_eq!(
            of(""),
            [r#"spec.timeZone: Invalid value: "": timeZone must be nil or non-empty string"#]
        );
    }

    #[test]
    fn a_tz_in_a_cron_job_schedule_is_kept_only_by_an_update_of_one_that_had_it() {
        let registry = Registry::new();
        let rt = registry.lookup("batch", "v1", "cronjobs").unwrap();
        let with_tz = json!({"spec": {"schedule": "TZ=UTC 0 * * * *"}});
        assert_eq!(validate(rt, &with_tz, None).len(), 1);
        assert!(validate(rt, &with_tz, Some(&with_tz)).is_empty());
        let both = json!({"spec": {"schedule": "TZ=UTC 0 * * * *", "timeZone": "UTC"}});
        assert_eq!(
            validate(rt, &both, Some(&with_tz))[0].to_string(),
            r#"spec.schedule: Invalid value: "TZ=UTC 0 * * * *": cannot use both timeZone field and TZ or CRON_TZ in schedule"#
        );
    }

    #[test]
    fn a_network_policy_port_of_an_unknown_protocol_is_refused_with_its_path() {
        let policy = json!({"spec": {"ingress": [{"ports": [{"port": 80, "protocol": "ICMP"}]}]}});
        assert_eq!(
            messages("networking.k8s.io", "v1", "networkpolicies", policy),
            [
                r#"spec.ingress[0].ports[0].protocol: Unsupported value: "ICMP": supported values: "TCP", "UDP", "SCTP""#
            ]
        );
    }

    #[test]
    fn endpoints_are_refused_for_their_addresses_node_names_and_ports() {
        let endpoints = json!({"subsets": [
            {"addresses": [{"ip": "127.0.0.1", "nodeName": "Node_1", "hostname": "a.b"}],
             "ports": [{"port": 80, "protocol": "TCP"}, {"name": "b", "port": 0, "protocol": "ICMP"}]},
            {"ports": [{"port": 80, "protocol": "TCP"}]}
        ]});
        assert_eq!(
            messages("", "v1", "endpoints", endpoints),
            [
                r#"subsets[0].addresses[0].hostname: Invalid value: "a.b": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"#,
                r#"subsets[0].addresses[0].nodeName: Invalid value: "Node_1": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"#,
                r#"subsets[0].addresses[0].ip: Invalid value: "127.0.0.1": may not be in the loopback range (127.0.0.0/8, ::1/128)"#,
                r#"subsets[0].ports[0].name: Required value"#,
                r#"subsets[0].ports[1].port: Invalid value: 0: must be between 1 and 65535, inclusive"#,
                r#"subsets[0].ports[1].protocol: Unsupported value: "ICMP": supported values: "SCTP", "TCP", "UDP""#,
                r#"subsets[1]: Required value: must specify `addresses` or `notReadyAddresses`"#,
            ]
        );
        assert_eq!(
            parse_ip_sloppy("010.000.000.001"),
            Some("10.0.0.1".parse().unwrap())
        );
    }

    #[test]
    fn a_storage_class_topology_is_refused_for_missing_or_repeated_values_and_terms() {
        let class = json!({"provisioner": "example.com/p", "allowedTopologies": [
            {"matchLabelExpressions": [{"key": "zone", "values": ["a", "a"]},
                                       {"key": "zone", "values": ["a"]}]},
            {"matchLabelExpressions": [{"key": "-bad", "values": []}]},
            {"matchLabelExpressions": [{"key": "-bad", "values": []}]}
        ]});
        let found = messages("storage.k8s.io", "v1", "storageclasses", class);
        assert_eq!(
            found[..2],
            [
                r#"allowedTopologies[0].matchLabelExpressions[0].values[1]: Duplicate value: "a""#,
                r#"allowedTopologies[0].matchLabelExpressions[1].key: Duplicate value: "zone""#,
            ]
        );
        assert_eq!(
            found[2],
            "allowedTopologies[1].matchLabelExpressions[0].values: Required value"
        );
        assert_eq!(
            found.last().unwrap(),
            "allowedTopologies[2].matchLabelExpressions: Duplicate value: \"\""
        );
    }

    #[test]
    fn only_system_priority_classes_may_exceed_a_billion() {
        let class = |name: &str| json!({"metadata": {"name": name}, "value": 2_000_000_000});
        assert_eq!(
            messages("scheduling.k8s.io", "v1", "priorityclasses", class("high")).len(),
            1
        );
        assert!(
            messages(
                "scheduling.k8s.io",
                "v1",
                "priorityclasses",
                class("system-node-critical")
            )
            .is_empty()
        );
    }
}

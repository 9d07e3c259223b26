//! Label and field selectors as the kube-apiserver parses and matches them (apimachinery 1.32
//! `labels.Parse` and `fields.ParseSelector`), with the real parse errors for a 400 BadRequest.

use std::fmt;

use serde_json::{Map, Value};
use thiserror::Error;

use super::names::{self, Cause};
use super::registry::ResourceType;

/// Why a selector was refused; `Display` is the apiserver's message.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum Error {
    /// A label selector requirement is malformed or carries an invalid key or value.
    #[error("unable to parse requirement: {0}")]
    Requirement(#[source] RequirementError),
    /// A label selector has a token where another was expected between requirements.
    #[error("found '{found}', expected: {expected}")]
    Unexpected {
        /// The literal found.
        found: String,
        /// What the parser wanted there.
        expected: &'static str,
    },
    /// A field selector term has no `=`, `==` or `!=`.
    #[error("invalid selector: '{selector}'; can't understand '{term}'")]
    FieldTerm {
        /// The whole selector.
        selector: String,
        /// The term that could not be split.
        term: String,
    },
    /// A field selector value has a backslash not followed by `\`, `,` or `=`.
    #[error("invalid field selector: invalid escape sequence: {0}")]
    InvalidEscape(String),
    /// A field selector value has an unescaped `,` or `=` (Go prints the rune as a number).
    #[error("invalid field selector: unescaped character in value: {}", u32::from(*.0))]
    UnescapedCharacter(char),
    /// A field selector names a field the resource cannot be selected on, for a resource
    /// whose conversion lists its own fields (pods, nodes, events, custom resources, …).
    #[error("field label not supported: {0}")]
    UnsupportedField(String),
    /// A field selector names a field other than `metadata.name` and `metadata.namespace`,
    /// for a resource that selects on nothing else (apimachinery's default conversion).
    #[error(r#""{0}" is not a known field selector: only "metadata.name", "metadata.namespace""#)]
    NotMetadataField(String),
    /// A field selector names a field a Job cannot be selected on (the batch conversion's
    /// own message).
    #[error("field label {0:?} not supported for Job")]
    UnsupportedJobField(String),
    /// A field selector names a field a ResourceSlice cannot be selected on (the
    /// resource.k8s.io conversion's own message).
    #[error("field label not supported for resource.k8s.io/v1, Kind=ResourceSlice: {0}")]
    UnsupportedResourceSliceField(String),
}

/// What is wrong inside one label selector requirement: the text after
/// `unable to parse requirement: `, and the field errors when a key or value was invalid.
#[derive(Debug, Clone, PartialEq)]
pub struct RequirementError {
    /// The `field.Error`s of an invalid key or value (empty for a syntax error).
    pub causes: Vec<Cause>,
    message: String,
}

impl RequirementError {
    /// A token was found where another was expected.
    fn unexpected(found: &str, expected: &str) -> Self {
        Self {
            causes: Vec::new(),
            message: format!("found '{found}', expected: {expected}"),
        }
    }

    /// `in`/`notin` not followed by `(` (Go's message has no comma here).
    fn open_parenthesis(found: &str) -> Self {
        Self {
            causes: Vec::new(),
            message: format!("found '{found}' expected: '('"),
        }
    }

    /// The key or values failed validation, e.g. `<nil>: Invalid value: "a b": name part …`.
    fn invalid(causes: Vec<Cause>) -> Self {
        Self {
            message: names::aggregate(&causes),
            causes,
        }
    }
}

impl fmt::Display for RequirementError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for RequirementError {}

/// The operator of a label requirement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    In,
    NotIn,
    Equals,
    DoubleEquals,
    NotEquals,
    Exists,
    DoesNotExist,
    GreaterThan,
    LessThan,
}

/// One parsed requirement: key, operator and the sorted, de-duplicated values.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Requirement {
    key: String,
    op: Op,
    values: Vec<String>,
}

impl Requirement {
    fn matches(&self, labels: &Map<String, Value>) -> bool {
        let value = labels.get(&self.key).map(label_string);
        match self.op {
            Op::In | Op::Equals | Op::DoubleEquals => {
                value.is_some_and(|v| self.values.contains(&v))
            }
            Op::NotIn | Op::NotEquals => value.is_none_or(|v| !self.values.contains(&v)),
            Op::Exists => value.is_some(),
            Op::DoesNotExist => value.is_none(),
            Op::GreaterThan | Op::LessThan => {
                let (Some(v), [rv]) = (value, self.values.as_slice()) else {
                    return false;
                };
                let (Ok(lv), Ok(rv)) = (v.parse::<i64>(), rv.parse::<i64>()) else {
                    return false;
                };
                if self.op == Op::GreaterThan {
                    lv > rv
                } else {
                    lv < rv
                }
            }
        }
    }
}

impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.op == Op::DoesNotExist {
            f.write_str("!")?;
        }
        f.write_str(&self.key)?;
        let op = match self.op {
            Op::Equals => "=",
            Op::DoubleEquals => "==",
            Op::NotEquals => "!=",
            Op::In => " in (",
            Op::NotIn => " notin (",
            Op::GreaterThan => ">",
            Op::LessThan => "<",
            Op::Exists | Op::DoesNotExist => return Ok(()),
        };
        f.write_str(op)?;
        f.write_str(&self.values.join(","))?;
        if matches!(self.op, Op::In | Op::NotIn) {
            f.write_str(")")?;
        }
        Ok(())
    }
}

/// A label value as `labels.Set` holds it (labels are strings; anything else counts as present).
fn label_string(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// A parsed label selector: an AND of requirements, sorted by key as the apiserver sorts them.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LabelSelector {
    requirements: Vec<Requirement>,
}

impl LabelSelector {
    /// Parses `labelSelector` syntax: `""`, `a=b`, `a==b`, `a!=b`, `a in (x,y)`, `a notin (x)`,
    /// `a`, `!a`, `a>1`, `a<1`, comma-separated (AND). Keys are validated as qualified names and
    /// values as label values, with the real messages.
    pub fn parse(s: &str) -> Result<Self, Error> {
        let tokens = lex(s);
        let mut p = Parser { tokens, pos: 0 };
        let mut requirements = p.parse()?;
        requirements.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(Self { requirements })
    }

    /// Whether `labels` (an object's `metadata.labels`, an empty map when absent) satisfies every requirement.
    pub fn matches(&self, labels: &Map<String, Value>) -> bool {
        self.requirements.iter().all(|r| r.matches(labels))
    }

    /// Whether the selector selects everything (no requirements).
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }
}

impl fmt::Display for LabelSelector {
    /// The canonical form (`labels.Selector.String()`), e.g. `a=b,c in (x,y)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.requirements.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{r}")?;
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tok {
    End,
    ClosedPar,
    Comma,
    DoesNotExist,
    DoubleEquals,
    Equals,
    GreaterThan,
    Identifier,
    In,
    LessThan,
    NotEquals,
    NotIn,
    OpenPar,
    Error,
}

fn keyword(s: &str) -> Option<Tok> {
    Some(match s {
        ")" => Tok::ClosedPar,
        "," => Tok::Comma,
        "!" => Tok::DoesNotExist,
        "==" => Tok::DoubleEquals,
        "=" => Tok::Equals,
        ">" => Tok::GreaterThan,
        "in" => Tok::In,
        "<" => Tok::LessThan,
        "!=" => Tok::NotEquals,
        "notin" => Tok::NotIn,
        "(" => Tok::OpenPar,
        _ => return None,
    })
}

fn is_special(b: u8) -> bool {
    matches!(b, b'=' | b'!' | b'(' | b')' | b',' | b'>' | b'<')
}

fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | b'\n')
}

/// The apimachinery lexer: identifiers end at whitespace or an operator character; operator
/// runs are matched greedily against the known operators.
fn lex(s: &str) -> Vec<(Tok, String)> {
    let b = s.as_bytes();
    let mut pos = 0;
    let mut out = Vec::new();
    loop {
        while pos < b.len() && is_space(b[pos]) {
            pos += 1;
        }
        if pos >= b.len() {
            out.push((Tok::End, String::new()));
            return out;
        }
        if is_special(b[pos]) {
            let start = pos;
            let mut last: Option<(Tok, usize)> = None;
            while pos < b.len() && is_special(b[pos]) {
                let candidate = &s[start..=pos];
                if let Some(t) = keyword(candidate) {
                    last = Some((t, pos + 1));
                } else if last.is_some() {
                    break;
                }
                pos += 1;
            }
            match last {
                Some((t, end)) => {
                    pos = end;
                    out.push((t, s[start..end].to_string()));
                }
                None => out.push((
                    Tok::Error,
                    format!("error expected: keyword found '{}'", &s[start..pos]),
                )),
            }
        } else {
            let start = pos;
            while pos < b.len() && !is_special(b[pos]) && !is_space(b[pos]) {
                pos += 1;
            }
            let lit = &s[start..pos];
            let t = match lit {
                "in" => Tok::In,
                "notin" => Tok::NotIn,
                _ => Tok::Identifier,
            };
            out.push((t, lit.to_string()));
        }
    }
}

struct Parser {
    tokens: Vec<(Tok, String)>,
    pos: usize,
}

/// In a value context `in` and `notin` are plain identifiers.
fn as_value(t: Tok) -> Tok {
    match t {
        Tok::In | Tok::NotIn => Tok::Identifier,
        t => t,
    }
}

impl Parser {
    fn peek_raw(&self) -> (Tok, String) {
        self.tokens
            .get(self.pos)
            .cloned()
            .unwrap_or((Tok::End, String::new()))
    }

    fn peek(&self) -> (Tok, String) {
        let (t, l) = self.peek_raw();
        (as_value(t), l)
    }

    fn next_raw(&mut self) -> (Tok, String) {
        let item = self.peek_raw();
        if self.pos < self.tokens.len() {
            self.pos += 1;
        }
        item
    }

    fn next(&mut self) -> (Tok, String) {
        let (t, l) = self.next_raw();
        (as_value(t), l)
    }

    fn parse(&mut self) -> Result<Vec<Requirement>, Error> {
        let mut reqs = Vec::new();
        loop {
            let (t, lit) = self.peek();
            match t {
                Tok::Identifier | Tok::DoesNotExist => {
                    reqs.push(self.requirement().map_err(Error::Requirement)?);
                    let (t, lit) = self.next();
                    match t {
                        Tok::End => return Ok(reqs),
                        Tok::Comma => {
                            let (t2, l2) = self.peek();
                            if t2 != Tok::Identifier && t2 != Tok::DoesNotExist {
                                return Err(Error::Unexpected {
                                    found: l2,
                                    expected: "identifier after ','",
                                });
                            }
                        }
                        _ => {
                            return Err(Error::Unexpected {
                                found: lit,
                                expected: "',' or 'end of string'",
                            });
                        }
                    }
                }
                Tok::End => return Ok(reqs),
                _ => {
                    return Err(Error::Unexpected {
                        found: lit,
                        expected: "!, identifier, or 'end of string'",
                    });
                }
            }
        }
    }

    fn requirement(&mut self) -> Result<Requirement, RequirementError> {
        let (key, inferred) = self.key_and_inferred_operator()?;
        if let Some(op) = inferred {
            return new_requirement(key, op, Vec::new());
        }
        let op = self.operator()?;
        let values = match op {
            Op::In | Op::NotIn => self.values()?,
            _ => self.exact_value()?,
        };
        new_requirement(key, op, values)
    }

    fn key_and_inferred_operator(&mut self) -> Result<(String, Option<Op>), RequirementError> {
        let (mut t, mut lit) = self.next();
        let mut op = None;
        if t == Tok::DoesNotExist {
            op = Some(Op::DoesNotExist);
            (t, lit) = self.next();
        }
        if t != Tok::Identifier {
            return Err(RequirementError::unexpected(&lit, "identifier"));
        }
        let errs = names::label_key(&lit);
        if !errs.is_empty() {
            return Err(RequirementError::invalid(vec![Cause::invalid(
                "<nil>",
                Value::from(lit.as_str()),
                errs.join("; "),
            )]));
        }
        let (next, _) = self.peek();
        if (next == Tok::End || next == Tok::Comma) && op.is_none() {
            op = Some(Op::Exists);
        }
        Ok((lit, op))
    }

    fn operator(&mut self) -> Result<Op, RequirementError> {
        let (t, lit) = self.next_raw();
        Ok(match t {
            Tok::In => Op::In,
            Tok::Equals => Op::Equals,
            Tok::DoubleEquals => Op::DoubleEquals,
            Tok::GreaterThan => Op::GreaterThan,
            Tok::LessThan => Op::LessThan,
            Tok::NotIn => Op::NotIn,
            Tok::NotEquals => Op::NotEquals,
            _ => {
                return Err(RequirementError::unexpected(
                    &lit,
                    "in, notin, =, ==, !=, gt, lt",
                ));
            }
        })
    }

    fn values(&mut self) -> Result<Vec<String>, RequirementError> {
        let (t, lit) = self.next();
        if t != Tok::OpenPar {
            return Err(RequirementError::open_parenthesis(&lit));
        }
        let (t, lit) = self.peek();
        match t {
            Tok::Identifier | Tok::Comma => {
                let set = self.identifiers_list()?;
                let (t, _) = self.next();
                if t != Tok::ClosedPar {
                    return Err(RequirementError::unexpected(&lit, "')'"));
                }
                Ok(set)
            }
            Tok::ClosedPar => {
                self.next();
                Ok(vec![String::new()])
            }
            _ => Err(RequirementError::unexpected(&lit, "',', ')' or identifier")),
        }
    }

    fn identifiers_list(&mut self) -> Result<Vec<String>, RequirementError> {
        let mut set: Vec<String> = Vec::new();
        loop {
            let (t, lit) = self.next();
            match t {
                Tok::Identifier => {
                    set.push(lit);
                    let (t2, l2) = self.peek();
                    match t2 {
                        Tok::Comma => continue,
                        Tok::ClosedPar => return Ok(set),
                        _ => return Err(RequirementError::unexpected(&l2, "',' or ')'")),
                    }
                }
                Tok::Comma => {
                    if set.is_empty() {
                        set.push(String::new());
                    }
                    let (t2, _) = self.peek();
                    if t2 == Tok::ClosedPar {
                        set.push(String::new());
                        return Ok(set);
                    }
                    if t2 == Tok::Comma {
                        self.next();
                        set.push(String::new());
                    }
                }
                _ => return Err(RequirementError::unexpected(&lit, "',', or identifier")),
            }
        }
    }

    fn exact_value(&mut self) -> Result<Vec<String>, RequirementError> {
        let (t, _) = self.peek();
        if t == Tok::End || t == Tok::Comma {
            return Ok(vec![String::new()]);
        }
        let (t, lit) = self.next();
        if t == Tok::Identifier {
            Ok(vec![lit])
        } else {
            Err(RequirementError::unexpected(&lit, "identifier"))
        }
    }
}

/// `labels.NewRequirement`: values become a sorted set, then are validated.
fn new_requirement(
    key: String,
    op: Op,
    mut values: Vec<String>,
) -> Result<Requirement, RequirementError> {
    values.sort();
    values.dedup();
    let mut causes = Vec::new();
    if matches!(op, Op::GreaterThan | Op::LessThan) {
        for (i, v) in values.iter().enumerate() {
            if v.parse::<i64>().is_err() {
                causes.push(Cause::invalid(
                    &format!("values[{i}]"),
                    Value::from(v.as_str()),
                    "for 'Gt', 'Lt' operators, the value must be an integer",
                ));
            }
        }
    }
    for (i, v) in values.iter().enumerate() {
        let errs = names::label_value(v);
        if !errs.is_empty() {
            causes.push(Cause::invalid(
                &format!("values[{i}][{key}]"),
                Value::from(v.as_str()),
                errs.join("; "),
            ));
        }
    }
    if causes.is_empty() {
        Ok(Requirement { key, op, values })
    } else {
        Err(RequirementError::invalid(causes))
    }
}

/// Whether a field requirement is `=`/`==` or `!=`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FieldOp {
    Equals,
    NotEquals,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct FieldTerm {
    field: String,
    op: FieldOp,
    value: String,
}

/// A parsed field selector: an AND of `field=value`, `field==value` and `field!=value` terms.
/// Once bound to a resource ([`FieldSelector::for_resource`]) it reads each field as that
/// resource's registry strategy does; unbound, it reads dotted JSON paths.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FieldSelector {
    terms: Vec<FieldTerm>,
    resource: Option<SelectableFields>,
}

impl FieldSelector {
    /// Parses `fieldSelector` syntax; values may escape `\,`, `\=` and `\\`. Terms are sorted
    /// (the server sorts them before parsing, so the first bad term reported is the first in order).
    pub fn parse(s: &str) -> Result<Self, Error> {
        let mut parts = split_terms(s);
        parts.sort();
        let mut terms = Vec::new();
        for part in parts {
            if part.is_empty() {
                continue;
            }
            let Some((field, op, rhs)) = split_term(part) else {
                return Err(Error::FieldTerm {
                    selector: s.to_string(),
                    term: part.to_string(),
                });
            };
            terms.push(FieldTerm {
                field: field.to_string(),
                op,
                value: unescape_value(rhs)?,
            });
        }
        Ok(Self {
            terms,
            resource: None,
        })
    }

    /// Binds the selector to the fields of `rt` as served at `version`: each field label goes
    /// through the resource's conversion (`spec.host` becomes `spec.nodeName` for pods), and a
    /// label it does not know is refused with kube-apiserver's message, the first in sorted
    /// order; matching then reads the fields as the resource's `ToSelectableFields` does.
    pub fn for_resource(mut self, rt: &ResourceType, version: &str) -> Result<Self, Error> {
        let fields = SelectableFields::of(rt, version);
        for term in &mut self.terms {
            term.field = fields.convert(&term.field)?;
        }
        self.resource = Some(fields);
        Ok(self)
    }

    /// Whether `object` satisfies every term; a dotted path that is missing reads as `""`,
    /// numbers and booleans read as their JSON text.
    pub fn matches(&self, object: &Value) -> bool {
        self.terms.iter().all(|t| {
            let actual = match &self.resource {
                Some(fields) => fields.value(object, &t.field),
                None => field_value(object, &t.field),
            };
            match t.op {
                FieldOp::Equals => actual == t.value,
                FieldOp::NotEquals => actual != t.value,
            }
        })
    }

    /// Whether the selector selects everything (no terms).
    pub fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }

    /// The value an `=`/`==` term requires of `field`, if any (`RequiresExactMatch`).
    pub fn exact_match(&self, field: &str) -> Option<&str> {
        self.terms
            .iter()
            .find(|t| t.field == field && t.op == FieldOp::Equals)
            .map(|t| t.value.as_str())
    }
}

/// Which conversion a resource's field labels go through (`AddFieldLabelConversionFunc` in
/// `pkg/apis/*/v1/conversion.go`, apimachinery's `DefaultMetaV1FieldSelectorConversion` for
/// resources without one, the CRD's `selectableFields` for custom resources) and how its
/// registry strategy's `ToSelectableFields` reads them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Selectable {
    /// `metadata.name` and `metadata.namespace` only.
    Metadata,
    Pod,
    Node,
    /// Core events.
    Event,
    /// `events.k8s.io` events: `regarding.*`, `reason`, `reportingController` and `type`
    /// (converted to the core labels `involvedObject.*` and `reportingComponent`).
    EventsV1,
    Namespace,
    Secret,
    Service,
    /// CertificateSigningRequests: `metadata.name` and `spec.signerName`.
    CertificateSigningRequest,
    /// ReplicationControllers: `status.replicas` besides metadata.
    ReplicationController,
    /// Jobs: `status.successful` besides metadata.
    Job,
    /// ResourceSlices: `metadata.name`, `spec.nodeName` and `spec.driver`.
    ResourceSlice,
    /// A custom resource: `metadata.*` and the selectable fields of the served version.
    Custom,
}

/// The fields one resource can be selected on, and how they read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SelectableFields {
    kind: Selectable,
    namespaced: bool,
    /// Labels the conversion accepts beyond `metadata.name`/`metadata.namespace`.
    extra: Vec<String>,
}

const POD_FIELDS: &[&str] = &[
    "spec.nodeName",
    "spec.restartPolicy",
    "spec.schedulerName",
    "spec.serviceAccountName",
    "spec.hostNetwork",
    "status.phase",
    "status.podIP",
    "status.podIPs",
    "status.nominatedNodeName",
];

const EVENT_FIELDS: &[&str] = &[
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "reason",
    "reportingComponent",
    "source",
    "type",
];

const EVENTS_V1_FIELDS: &[&str] = &[
    "regarding.kind",
    "regarding.namespace",
    "regarding.name",
    "regarding.uid",
    "regarding.apiVersion",
    "regarding.resourceVersion",
    "regarding.fieldPath",
    "reason",
    "reportingController",
    "type",
];

impl SelectableFields {
    /// The fields of `rt` at `version`.
    pub fn of(rt: &ResourceType, version: &str) -> Self {
        let (kind, extra): (Selectable, &[&str]) = match (rt.group.as_str(), rt.resource.as_str()) {
            _ if rt.is_custom() => (Selectable::Custom, &[]),
            ("", "pods") => (Selectable::Pod, POD_FIELDS),
            ("", "nodes") => (Selectable::Node, &["spec.unschedulable"]),
            ("", "events") => (Selectable::Event, EVENT_FIELDS),
            ("events.k8s.io", "events") => (Selectable::EventsV1, EVENTS_V1_FIELDS),
            ("", "namespaces") => (Selectable::Namespace, &["status.phase"]),
            ("", "secrets") => (Selectable::Secret, &["type"]),
            ("", "services") => (Selectable::Service, &["spec.clusterIP", "spec.type"]),
            ("certificates.k8s.io", "certificatesigningrequests") => {
                (Selectable::CertificateSigningRequest, &["spec.signerName"])
            }
            ("", "replicationcontrollers") => {
                (Selectable::ReplicationController, &["status.replicas"])
            }
            ("batch", "jobs") => (Selectable::Job, &["status.successful"]),
            ("resource.k8s.io", "resourceslices") => {
                (Selectable::ResourceSlice, &["spec.nodeName", "spec.driver"])
            }
            _ => (Selectable::Metadata, &[]),
        };
        let mut extra: Vec<String> = extra.iter().map(|f| f.to_string()).collect();
        if kind == Selectable::Custom {
            extra = rt.selectable_fields(version);
        }
        Self {
            kind,
            namespaced: rt.namespaced,
            extra,
        }
    }

    /// Every label a selector may name for this resource, `metadata.*` first.
    pub fn labels(&self) -> Vec<&str> {
        let metadata: &[&str] = match self.kind {
            // Their conversions leave out metadata.namespace.
            Selectable::Node
            | Selectable::Namespace
            | Selectable::CertificateSigningRequest
            | Selectable::ResourceSlice => &["metadata.name"],
            _ => &["metadata.name", "metadata.namespace"],
        };
        let mut labels = metadata.to_vec();
        labels.extend(self.extra.iter().map(String::as_str));
        if self.kind == Selectable::Pod {
            labels.push("spec.host");
        }
        labels
    }

    /// The label a selector's field becomes, or the conversion's refusal.
    fn convert(&self, label: &str) -> Result<String, Error> {
        if self.kind == Selectable::Pod && label == "spec.host" {
            return Ok("spec.nodeName".into());
        }
        if self.labels().contains(&label) {
            return Ok(label.to_string());
        }
        Err(match self.kind {
            Selectable::Metadata => Error::NotMetadataField(label.to_string()),
            Selectable::Job => Error::UnsupportedJobField(label.to_string()),
            Selectable::ResourceSlice => Error::UnsupportedResourceSliceField(label.to_string()),
            _ => Error::UnsupportedField(label.to_string()),
        })
    }

    /// The value of `label` in `object` (as served), as `ToSelectableFields` renders it; a
    /// label absent from the resource's field set reads as `""`.
    pub fn value(&self, object: &Value, label: &str) -> String {
        let text = |path: &str| field_value(object, path);
        let or = |path: &str, default: &str| match object.pointer(path) {
            Some(Value::Null) | None => default.to_string(),
            Some(_) => field_value(object, &path[1..].replace('/', ".")),
        };
        match (self.kind, label) {
            (_, "metadata.name") => text(label),
            (_, "metadata.namespace") if self.namespaced => text(label),
            (_, "metadata.namespace") => String::new(),
            (Selectable::Pod, "spec.hostNetwork") => or("/spec/hostNetwork", "false"),
            (Selectable::Pod, "status.podIP") => text("status.podIPs.0.ip"),
            // Listed by the conversion but not in the pod's field set.
            (Selectable::Pod, "status.podIPs") => String::new(),
            (Selectable::Node, "spec.unschedulable") => or("/spec/unschedulable", "false"),
            // Integers of the status, printed as Go prints them, `0` when unset.
            (Selectable::ReplicationController, "status.replicas") => or("/status/replicas", "0"),
            (Selectable::Job, "status.successful") => or("/status/succeeded", "0"),
            (Selectable::Event, "source") => {
                first_set(&[text("source.component"), text("reportingComponent")])
            }
            (_, field) if self.extra.iter().any(|f| f == field) => text(field),
            _ => String::new(),
        }
    }
}

/// The first non-empty value, or `""`.
fn first_set(values: &[String]) -> String {
    values
        .iter()
        .find(|v| !v.is_empty())
        .cloned()
        .unwrap_or_default()
}

/// Splits on commas not escaped by a backslash (the backslash is kept for unescaping).
fn split_terms(s: &str) -> Vec<&str> {
    if s.is_empty() {
        return Vec::new();
    }
    let mut terms = Vec::new();
    let mut start = 0;
    let mut in_slash = false;
    for (i, c) in s.char_indices() {
        if in_slash {
            in_slash = false;
        } else if c == '\\' {
            in_slash = true;
        } else if c == ',' {
            terms.push(&s[start..i]);
            start = i + 1;
        }
    }
    terms.push(&s[start..]);
    terms
}

/// Splits a term at its first operator (`!=`, then `==`, then `=` at each position).
fn split_term(term: &str) -> Option<(&str, FieldOp, &str)> {
    for (i, _) in term.char_indices() {
        let rest = &term[i..];
        for (op, kind) in [
            ("!=", FieldOp::NotEquals),
            ("==", FieldOp::Equals),
            ("=", FieldOp::Equals),
        ] {
            if let Some(rhs) = rest.strip_prefix(op) {
                return Some((&term[..i], kind, rhs));
            }
        }
    }
    None
}

/// `fields.UnescapeValue`.
fn unescape_value(s: &str) -> Result<String, Error> {
    let mut out = String::with_capacity(s.len());
    let mut in_slash = false;
    for c in s.chars() {
        if in_slash {
            match c {
                '\\' | ',' | '=' => out.push(c),
                _ => return Err(Error::InvalidEscape(format!("\\{c}"))),
            }
            in_slash = false;
            continue;
        }
        match c {
            '\\' => in_slash = true,
            ',' | '=' => return Err(Error::UnescapedCharacter(c)),
            _ => out.push(c),
        }
    }
    if in_slash {
        return Err(Error::InvalidEscape("\\".to_string()));
    }
    Ok(out)
}

/// The string a dotted field path selects in an object.
fn field_value(object: &Value, path: &str) -> String {
    let mut cur = object;
    for part in path.split('.') {
        let next = match (cur, part.parse::<usize>()) {
            (Value::Array(items), Ok(i)) => items.get(i),
            _ => cur.get(part),
        };
        match next {
            Some(v) => cur = v,
            None => return String::new(),
        }
    }
    match cur {
        Value::String(s) => s.clone(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labels(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    fn parse_err(s: &str) -> String {
        match LabelSelector::parse(s) {
            Ok(sel) => panic!("{s:?} parsed as {sel}"),
            Err(e) => e.to_string(),
        }
    }

    fn sel(s: &str) -> LabelSelector {
        LabelSelector::parse(s).unwrap_or_else(|e| panic!("{s:?} refused: {e}"))
    }

    #[test]
    fn an_empty_label_selector_matches_everything() {
        let s = sel("");
        assert!(s.is_empty());
        assert!(s.matches(&Map::new()));
        assert!(sel("   ").is_empty());
    }

    #[test]
    fn equality_requirements_match_the_exact_value() {
        let l = labels(json!({"app": "web", "tier": "front"}));
        assert!(sel("app=web").matches(&l));
        assert!(sel("app==web").matches(&l));
        assert!(!sel("app=db").matches(&l));
        assert!(sel("app!=db").matches(&l));
        assert!(sel("missing!=x").matches(&l), "!= matches an absent key");
        assert!(sel("app=web,tier=front").matches(&l));
        assert!(!sel("app=web,tier=back").matches(&l));
        assert!(sel(" app = web , tier = front ").matches(&l));
    }

    #[test]
    fn set_requirements_match_membership_and_absence() {
        let l = labels(json!({"env": "prod"}));
        assert!(sel("env in (prod,staging)").matches(&l));
        assert!(!sel("env in (dev)").matches(&l));
        assert!(sel("env notin (dev)").matches(&l));
        assert!(!sel("env notin (prod)").matches(&l));
        assert!(sel("other notin (x)").matches(&l));
        assert!(!sel("other in (x)").matches(&l));
        assert!(
            sel("env in (in,prod)").matches(&l),
            "in is a value inside parentheses"
        );
    }

    #[test]
    fn existence_requirements_test_for_the_key() {
        let l = labels(json!({"app": ""}));
        assert!(sel("app").matches(&l));
        assert!(!sel("!app").matches(&l));
        assert!(sel("!other").matches(&l));
        assert!(!sel("other").matches(&l));
        assert!(sel("!other,app").matches(&l));
    }

    #[test]
    fn empty_values_and_empty_sets_mean_the_empty_string() {
        let l = labels(json!({"a": ""}));
        assert!(sel("a=").matches(&l));
        assert!(sel("a in ()").matches(&l));
        assert!(sel("a in (,x)").matches(&l));
        assert!(!sel("a=,b").matches(&l));
    }

    #[test]
    fn greater_and_less_than_compare_integers() {
        let l = labels(json!({"n": "5", "s": "x"}));
        assert!(sel("n>4").matches(&l));
        assert!(!sel("n>5").matches(&l));
        assert!(sel("n<6").matches(&l));
        assert!(!sel("s>1").matches(&l));
        assert_eq!(
            parse_err("n>x"),
            "unable to parse requirement: values[0]: Invalid value: \"x\": for 'Gt', 'Lt' operators, the value must be an integer"
        );
    }

    #[test]
    fn requirements_are_sorted_by_key_for_display() {
        assert_eq!(sel("z=1,a in (y,x),!m").to_string(), "a in (x,y),!m,z=1");
    }

    #[test]
    fn an_invalid_key_reads_like_the_apimachinery_error() {
        assert_eq!(
            parse_err("bad_key_=x"),
            "unable to parse requirement: <nil>: Invalid value: \"bad_key_\": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
        );
    }

    #[test]
    fn an_invalid_value_is_validated_as_a_label_value() {
        assert_eq!(
            parse_err("app=-web"),
            "unable to parse requirement: values[0][app]: Invalid value: \"-web\": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
        );
        // Values are a sorted set, so the index is the position after sorting.
        let long = "v".repeat(64);
        assert_eq!(
            parse_err(&format!("a in (ok,{long})")),
            format!(
                "unable to parse requirement: values[1][a]: Invalid value: \"{long}\": must be no more than 63 characters"
            )
        );
    }

    #[test]
    fn syntax_errors_name_what_was_expected() {
        assert_eq!(
            parse_err("a b"),
            "unable to parse requirement: found 'b', expected: in, notin, =, ==, !=, gt, lt"
        );
        assert_eq!(
            parse_err("a in x"),
            "unable to parse requirement: found 'x' expected: '('"
        );
        assert_eq!(
            parse_err("a in (x"),
            "unable to parse requirement: found '', expected: ',' or ')'"
        );
        assert_eq!(parse_err("a,"), "found '', expected: identifier after ','");
        assert_eq!(
            parse_err("(a)"),
            "found '(', expected: !, identifier, or 'end of string'"
        );
        assert_eq!(
            parse_err("a=b c"),
            "found 'c', expected: ',' or 'end of string'"
        );
        assert_eq!(
            parse_err("!=a"),
            "found '!=', expected: !, identifier, or 'end of string'"
        );
        assert_eq!(
            parse_err("!a=b"),
            "found '=', expected: ',' or 'end of string'"
        );
        assert_eq!(
            parse_err("a=(b)"),
            "unable to parse requirement: found '(', expected: identifier"
        );
    }

    #[test]
    fn requirement_errors_keep_their_cause() {
        let err = LabelSelector::parse("a in x").err();
        let source = err
            .as_ref()
            .and_then(|e| std::error::Error::source(e))
            .map(ToString::to_string);
        assert_eq!(source.as_deref(), Some("found 'x' expected: '('"));
        match LabelSelector::parse("bad_key_=x") {
            Err(Error::Requirement(r)) => {
                assert_eq!(r.causes.len(), 1);
                assert_eq!(r.causes[0].field, "<nil>");
                assert_eq!(r.causes[0].reason, "FieldValueInvalid");
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn odd_label_selector_inputs_never_panic() {
        for s in [
            "!",
            "!!",
            "=",
            "==a",
            "a===b",
            "a!==b",
            "é=ü",
            "a in (",
            "a in ((",
            "a notin",
            ",",
            "a,,b",
            "a in (,,)",
            "<",
            "a<>b",
            "\u{0}",
        ] {
            let _ = LabelSelector::parse(s);
        }
    }

    #[test]
    fn field_selectors_match_dotted_paths() {
        let pod = json!({
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": {"nodeName": "n1", "replicas": 3, "ready": true},
            "status": {"phase": "Running"}
        });
        let f = |s: &str| FieldSelector::parse(s).unwrap_or_else(|e| panic!("{s:?}: {e}"));
        assert!(f("metadata.name=p").matches(&pod));
        assert!(f("metadata.name==p,spec.nodeName=n1").matches(&pod));
        assert!(!f("metadata.name=q").matches(&pod));
        assert!(f("status.phase!=Pending").matches(&pod));
        assert!(
            f("spec.missing=").matches(&pod),
            "a missing field reads as empty"
        );
        assert!(f("spec.replicas=3,spec.ready=true").matches(&pod));
        assert!(f("").is_empty());
        assert!(f("").matches(&pod));
        assert_eq!(f("metadata.name=p").exact_match("metadata.name"), Some("p"));
        assert_eq!(f("metadata.name!=p").exact_match("metadata.name"), None);
    }

    #[test]
    fn field_selector_values_unescape_commas_equals_and_backslashes() {
        let obj = json!({"metadata": {"name": "a,b=c\\d"}});
        let s = FieldSelector::parse("metadata.name=a\\,b\\=c\\\\d")
            .unwrap_or_else(|e| panic!("refused: {e}"));
        assert!(s.matches(&obj));
        assert_eq!(s.terms.len(), 1);
    }

    #[test]
    fn field_selector_errors_read_like_the_server() {
        let e = |s: &str| match FieldSelector::parse(s) {
            Ok(_) => panic!("{s:?} accepted"),
            Err(e) => e.to_string(),
        };
        assert_eq!(
            e("metadata.name"),
            "invalid selector: 'metadata.name'; can't understand 'metadata.name'"
        );
        assert_eq!(
            e("z=1,b"),
            "invalid selector: 'z=1,b'; can't understand 'b'"
        );
        assert_eq!(
            e("a=b\\c"),
            "invalid field selector: invalid escape sequence: \\c"
        );
        assert_eq!(
            e("a=b\\"),
            "invalid field selector: invalid escape sequence: \\"
        );
        assert_eq!(
            e("a=b=c"),
            "invalid field selector: unescaped character in value: 61"
        );
    }

    fn bound(selector: &str, group: &str, resource: &str) -> Result<FieldSelector, String> {
        let registry = super::super::registry::Registry::new();
        let rt = registry
            .get(&super::super::status::GroupResource::new(group, resource))
            .unwrap_or_else(|| panic!("{group}/{resource} is served"));
        FieldSelector::parse(selector)
            .and_then(|f| f.for_resource(rt, "v1"))
            .map_err(|e| e.to_string())
    }

    #[test]
    fn certificate_signing_requests_select_on_their_name_and_signer_only() {
        const CSRS: (&str, &str) = ("certificates.k8s.io", "certificatesigningrequests");
        let selector = bound("spec.signerName=example.com/a", CSRS.0, CSRS.1).unwrap();
        assert!(selector.matches(&json!({"metadata": {"name": "x"},
            "spec": {"signerName": "example.com/a"}})));
        assert!(!selector.matches(&json!({"spec": {"signerName": "example.com/b"}})));
        for label in ["metadata.namespace", "spec.username"] {
            assert_eq!(
                bound(&format!("{label}=x"), CSRS.0, CSRS.1).err(),
                Some(format!("field label not supported: {label}"))
            );
        }
    }

    #[test]
    fn unsupported_fields_are_refused_with_the_message_of_the_resource_conversion() {
        assert_eq!(
            bound("spec.foo=bar,metadata.name=x", "", "pods")
                .err()
                .as_deref(),
            Some("field label not supported: spec.foo")
        );
        assert_eq!(
            bound("data.n=1", "", "configmaps").err().as_deref(),
            Some(
                r#""data.n" is not a known field selector: only "metadata.name", "metadata.namespace""#
            )
        );
        assert_eq!(
            bound("metadata.namespace=x", "", "nodes").err().as_deref(),
            Some("field label not supported: metadata.namespace")
        );
        assert!(bound("spec.nodeName=n1,status.podIPs=x", "", "pods").is_ok());
        assert!(bound("type=Opaque", "", "secrets").is_ok());
        assert_eq!(
            bound("status.replicas=0", "apps", "replicasets")
                .err()
                .as_deref(),
            Some(
                r#""status.replicas" is not a known field selector: only "metadata.name", "metadata.namespace""#
            )
        );
        assert_eq!(
            bound("source=x", "events.k8s.io", "events")
                .err()
                .as_deref(),
            Some("field label not supported: source")
        );
    }

    #[test]
    fn bound_selectors_read_fields_as_the_resource_strategy_does() {
        let pod = json!({"metadata": {"name": "p", "namespace": "ns"},
            "spec": {"nodeName": "n1"}, "status": {"podIPs": [{"ip": "10.1.0.4"}]}});
        let matches = |s: &str, group: &str, resource: &str, obj: &Value| {
            bound(s, group, resource)
                .unwrap_or_else(|e| panic!("{s:?}: {e}"))
                .matches(obj)
        };
        assert!(matches("spec.hostNetwork=false", "", "pods", &pod));
        assert!(matches("status.podIP=10.1.0.4", "", "pods", &pod));
        assert!(
            matches("spec.host=n1", "", "pods", &pod),
            "spec.host is spec.nodeName"
        );
        assert!(matches(
            "spec.unschedulable=false",
            "",
            "nodes",
            &json!({"metadata": {"name": "n"}})
        ));
        let event = json!({"metadata": {"name": "e", "namespace": "ns"},
            "reportingComponent": "ctl", "source": {}, "involvedObject": {"kind": "Pod"}});
        assert!(matches(
            "source=ctl,involvedObject.kind=Pod",
            "",
            "events",
            &event
        ));
        let v1 = json!({"metadata": {"name": "e", "namespace": "ns"},
            "reportingController": "ctl", "regarding": {"kind": "Pod"}});
        assert!(matches(
            "reportingController=ctl,regarding.kind=Pod",
            "events.k8s.io",
            "events",
            &v1
        ));
        let ns = json!({"metadata": {"name": "a"}, "status": {"phase": "Active"}});
        assert!(matches(
            "metadata.name=a,status.phase=Active",
            "",
            "namespaces",
            &ns
        ));
    }

    #[test]
    fn odd_field_selector_inputs_never_panic() {
        for s in ["=", "!=", "==", ",", "\\", "é=ü", "a!=", "\\,=x", "a=\\é"] {
            let _ = FieldSelector::parse(s).map(|f| f.matches(&json!(null)));
        }
    }
}

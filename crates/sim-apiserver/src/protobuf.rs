//! Decodes `application/vnd.kubernetes.protobuf` request bodies (as kubectl's typed commands and
//! client-go's typed clients send them) into the JSON objects the same requests would have carried
//! as JSON.
//!
//! A body is the 4-byte magic `k8s\0` followed by a `runtime.Unknown` envelope
//! (`typeMeta = 1 {apiVersion = 1, kind = 2}`, `raw = 2`, `contentEncoding = 3`,
//! `contentType = 4`) whose `raw` bytes are the proto2 encoding of the object itself.
//!
//! The object is decoded by one generic walker over a schema table: each message type lists its
//! field numbers with the JSON name and the JSON form of the value. The table (`KINDS` and every
//! message it reaches, for every built-in kind of Kubernetes 1.34) is generated from the Go types
//! by `protogen` into the `schema` submodule (`protobuf_schema.rs`).
//!
//! Go's protobuf encoder writes every non-pointer scalar, even when it is zero, so zero values
//! of fields that carry `omitempty` in their Go JSON tag are dropped again here; pointer fields
//! (`*bool`, `*int32`, `*int64`, `*string`) and fields without `omitempty` keep their zero values.
//! An empty `Time` or `MicroTime` (the zero time) is omitted, as is an empty raw JSON value
//! (which Go writes as `null`). Repeated fields and maps appear only when they have entries.
//! Embedded structs that Go inlines in JSON are nested messages on the wire whose fields land in
//! the enclosing object. Unknown field numbers are skipped.
//!
//! The server answers in JSON, so only request decoding lives here; the same table gives the
//! answers' writer ([`crate::answer_json`]) each message's fields in declaration order.

use base64::Engine as _;
use serde_json::{Map, Value};

/// The prefix of every Kubernetes protobuf body.
const MAGIC: &[u8] = b"k8s\0";

/// The only content type accepted for the envelope's raw bytes (besides empty, meaning the same).
const PROTOBUF_CONTENT_TYPE: &str = "application/vnd.kubernetes.protobuf";

/// How deep messages may nest below the top-level object: CustomResourceDefinition schemas of
/// operators embedding pod templates nest deeply (each property is a map entry and a message).
const MAX_DEPTH: usize = 100;

/// Seconds since the Unix epoch of Go's zero `time.Time` (0001-01-01T00:00:00Z).
const GO_ZERO_TIME_SECONDS: i64 = -62_135_596_800;

/// Seconds since the Unix epoch of 9999-12-31T23:59:59Z, the last instant RFC 3339 can write.
const MAX_TIME_SECONDS: i64 = 253_402_300_799;

/// Nanoseconds in a second, for normalizing a `MicroTime`'s nanos as Go's time.Unix does.
const NANOS_PER_SECOND: i32 = 1_000_000_000;

/// Why a protobuf request body could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The body does not start with the `k8s\0` magic of the Kubernetes protobuf serializer.
    #[error("body does not start with the kubernetes protobuf magic \"k8s\\0\"")]
    MissingMagic,
    /// A varint, a length-delimited value or a fixed-width value runs past the end of its message.
    #[error("truncated protobuf data in {message}")]
    Truncated {
        /// The message being read.
        message: &'static str,
    },
    /// A varint longer than ten bytes or larger than 64 bits.
    #[error("malformed varint in {message}")]
    BadVarint {
        /// The message being read.
        message: &'static str,
    },
    /// A tag whose field number is zero or larger than protobuf allows.
    #[error("invalid field number {number} in {message}")]
    BadFieldNumber {
        /// The message being read.
        message: &'static str,
        /// The field number found.
        number: u64,
    },
    /// A wire type that is not skippable here: groups (3 and 4) and the undefined 6 and 7.
    #[error("unsupported wire type {wire_type} for field {field} in {message}")]
    UnsupportedWireType {
        /// The message being read.
        message: &'static str,
        /// The field number of the tag.
        field: u32,
        /// The wire type of the tag.
        wire_type: u8,
    },
    /// A known field arrived with a wire type that does not fit its declared type.
    #[error("field {field} ({json}) of {message} has wire type {found}, expected {expected}")]
    WireTypeMismatch {
        /// The message being read.
        message: &'static str,
        /// The field number.
        field: u32,
        /// The field's JSON name.
        json: &'static str,
        /// The wire type the field's type needs.
        expected: u8,
        /// The wire type found.
        found: u8,
    },
    /// A string field (or map key) that is not valid UTF-8.
    #[error("field {json} of {message} is not valid utf-8")]
    InvalidUtf8 {
        /// The message being read.
        message: &'static str,
        /// The field's JSON name.
        json: &'static str,
    },
    /// A timestamp outside 0001-01-01T00:00:00Z ..= 9999-12-31T23:59:59Z.
    #[error("field {json} of {message} holds a timestamp out of range ({seconds} seconds)")]
    InvalidTimestamp {
        /// The message being read.
        message: &'static str,
        /// The field's JSON name.
        json: &'static str,
        /// The seconds since the Unix epoch found.
        seconds: i64,
    },
    /// A raw JSON field (a RawExtension, FieldsV1 or apiextensions JSON) that is not JSON.
    #[error("field {json} of {message} does not hold valid json")]
    InvalidJson {
        /// The message being read.
        message: &'static str,
        /// The field's JSON name.
        json: &'static str,
    },
    /// Messages nested deeper than the decoder allows.
    #[error("protobuf messages nested deeper than {max} levels")]
    TooDeep {
        /// The deepest nesting allowed.
        max: usize,
    },
    /// The envelope names a content encoding (such as gzip) for its raw bytes.
    #[error("unsupported content encoding {0:?} in the protobuf envelope")]
    UnsupportedEncoding(String),
    /// The envelope declares its raw bytes to be of another content type.
    #[error("unsupported content type {0:?} in the protobuf envelope")]
    UnsupportedContentType(String),
    /// The envelope's apiVersion and kind name a kind without a schema here.
    #[error(
        "the simulator accepts {kind:?} of apiVersion {api_version:?} only as json, not as protobuf"
    )]
    UnsupportedKind {
        /// The envelope's apiVersion.
        api_version: String,
        /// The envelope's kind.
        kind: String,
    },
}

/// Decodes a Kubernetes protobuf request body (magic `k8s\0` + runtime.Unknown envelope) into the
/// JSON object the same request would have carried as JSON, with apiVersion and kind from the envelope's TypeMeta.
///
/// # Errors
/// [`Error::MissingMagic`] without the magic, [`Error::UnsupportedKind`] for a kind without a
/// schema here, [`Error::UnsupportedEncoding`] / [`Error::UnsupportedContentType`] for an
/// envelope this decoder cannot read, and the other variants for malformed protobuf data.
pub fn decode(body: &[u8]) -> Result<Value, Error> {
    let rest = body.strip_prefix(MAGIC).ok_or(Error::MissingMagic)?;
    let envelope = Envelope::read(rest)?;
    if !envelope.content_encoding.is_empty() {
        return Err(Error::UnsupportedEncoding(envelope.content_encoding));
    }
    if !envelope.content_type.is_empty() && envelope.content_type != PROTOBUF_CONTENT_TYPE {
        return Err(Error::UnsupportedContentType(envelope.content_type));
    }
    let schema = KINDS
        .binary_search_by(|(api_version, kind, _)| {
            (*api_version, *kind).cmp(&(envelope.api_version.as_str(), envelope.kind.as_str()))
        })
        .map(|at| KINDS[at].2)
        .map_err(|_| Error::UnsupportedKind {
            api_version: envelope.api_version.clone(),
            kind: envelope.kind.clone(),
        })?;
    let mut object = Map::new();
    object.insert("apiVersion".into(), Value::String(envelope.api_version));
    object.insert("kind".into(), Value::String(envelope.kind));
    decode_message(envelope.raw, schema, 0, &mut object)?;
    Ok(Value::Object(object))
}

// ---------------------------------------------------------------------------------------------
// Wire format
// ---------------------------------------------------------------------------------------------

const WIRE_VARINT: u8 = 0;
const WIRE_FIXED64: u8 = 1;
const WIRE_LEN: u8 = 2;
const WIRE_FIXED32: u8 = 5;

/// The largest field number protobuf allows.
const MAX_FIELD_NUMBER: u64 = (1 << 29) - 1;

/// A cursor over the bytes of one message.
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    message: &'static str,
}

impl<'a> Reader<'a> {
    fn new(buf: &'a [u8], message: &'static str) -> Self {
        Self {
            buf,
            pos: 0,
            message,
        }
    }

    fn at_end(&self) -> bool {
        self.pos >= self.buf.len()
    }

    fn varint(&mut self) -> Result<u64, Error> {
        let mut value = 0u64;
        for i in 0..10 {
            let byte = *self.buf.get(self.pos).ok_or(Error::Truncated {
                message: self.message,
            })?;
            self.pos += 1;
            if i == 9 && byte > 1 {
                return Err(Error::BadVarint {
                    message: self.message,
                });
            }
            value |= u64::from(byte & 0x7f) << (7 * i);
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(Error::BadVarint {
            message: self.message,
        })
    }

    fn take(&mut self, len: usize) -> Result<&'a [u8], Error> {
        let end = self
            .pos
            .checked_add(len)
            .filter(|end| *end <= self.buf.len())
            .ok_or(Error::Truncated {
                message: self.message,
            })?;
        let bytes = &self.buf[self.pos..end];
        self.pos = end;
        Ok(bytes)
    }

    fn length_delimited(&mut self) -> Result<&'a [u8], Error> {
        let len = self.varint()?;
        let len = usize::try_from(len).map_err(|_| Error::Truncated {
            message: self.message,
        })?;
        self.take(len)
    }

    /// Reads a tag: the field number and the wire type.
    fn tag(&mut self) -> Result<(u32, u8), Error> {
        let key = self.varint()?;
        let number = key >> 3;
        if number == 0 || number > MAX_FIELD_NUMBER {
            return Err(Error::BadFieldNumber {
                message: self.message,
                number,
            });
        }
        // Both casts are lossless: the number was bounded above and the wire type is 3 bits.
        Ok((number as u32, (key & 7) as u8))
    }

    /// Skips the value of a field this decoder does not know.
    fn skip(&mut self, field: u32, wire_type: u8) -> Result<(), Error> {
        match wire_type {
            WIRE_VARINT => self.varint().map(drop),
            WIRE_FIXED64 => self.take(8).map(drop),
            WIRE_LEN => self.length_delimited().map(drop),
            WIRE_FIXED32 => self.take(4).map(drop),
            _ => Err(Error::UnsupportedWireType {
                message: self.message,
                field,
                wire_type,
            }),
        }
    }
}

/// The fields of the `runtime.Unknown` envelope.
struct Envelope<'a> {
    api_version: String,
    kind: String,
    raw: &'a [u8],
    content_encoding: String,
    content_type: String,
}

impl<'a> Envelope<'a> {
    fn read(bytes: &'a [u8]) -> Result<Self, Error> {
        let mut envelope = Envelope {
            api_version: String::new(),
            kind: String::new(),
            raw: &[],
            content_encoding: String::new(),
            content_type: String::new(),
        };
        let mut reader = Reader::new(bytes, "Unknown");
        while !reader.at_end() {
            let (field, wire_type) = reader.tag()?;
            match (field, wire_type) {
                (1, WIRE_LEN) => {
                    let type_meta = reader.length_delimited()?;
                    let mut inner = Reader::new(type_meta, "TypeMeta");
                    while !inner.at_end() {
                        match inner.tag()? {
                            (1, WIRE_LEN) => {
                                envelope.api_version =
                                    envelope_string(&mut inner, "TypeMeta", "apiVersion")?;
                            }
                            (2, WIRE_LEN) => {
                                envelope.kind = envelope_string(&mut inner, "TypeMeta", "kind")?;
                            }
                            (other, wire) => inner.skip(other, wire)?,
                        }
                    }
                }
                (2, WIRE_LEN) => envelope.raw = reader.length_delimited()?,
                (3, WIRE_LEN) => {
                    envelope.content_encoding =
                        envelope_string(&mut reader, "Unknown", "contentEncoding")?;
                }
                (4, WIRE_LEN) => {
                    envelope.content_type = envelope_string(&mut reader, "Unknown", "contentType")?;
                }
                (1..=4, found) => {
                    return Err(Error::WireTypeMismatch {
                        message: "Unknown",
                        field,
                        json: ["typeMeta", "raw", "contentEncoding", "contentType"]
                            [field as usize - 1],
                        expected: WIRE_LEN,
                        found,
                    });
                }
                (other, wire) => reader.skip(other, wire)?,
            }
        }
        Ok(envelope)
    }
}

fn envelope_string(
    reader: &mut Reader<'_>,
    message: &'static str,
    json: &'static str,
) -> Result<String, Error> {
    let bytes = reader.length_delimited()?;
    utf8(bytes, message, json)
}

fn utf8(bytes: &[u8], message: &'static str, json: &'static str) -> Result<String, Error> {
    String::from_utf8(bytes.to_vec()).map_err(|_| Error::InvalidUtf8 { message, json })
}

// ---------------------------------------------------------------------------------------------
// Schema
// ---------------------------------------------------------------------------------------------

/// The messages of every built-in kind and `KINDS`, generated from the Go types.
#[path = "protobuf_schema.rs"]
mod schema;

use schema::KINDS;

/// The protobuf type of a value and the JSON form it takes.
#[derive(Clone, Copy)]
pub(crate) enum Type {
    /// `string` → JSON string.
    Str,
    /// `int64` varint → JSON number.
    Int64,
    /// `int32` varint → JSON number.
    Int32,
    /// `bool` varint → JSON boolean.
    Bool,
    /// `double` (fixed64) → JSON number; an integer when it has no fraction, as Go writes it.
    Double,
    /// `bytes` → base64 JSON string.
    Bytes,
    /// meta/v1 `Time {seconds = 1, nanos = 2}` → RFC 3339 string at second precision.
    Time,
    /// meta/v1 `MicroTime {seconds = 1, nanos = 2}` → RFC 3339 string with exactly six
    /// fractional digits (nanoseconds truncated to microseconds, as metav1.MicroTime writes JSON).
    MicroTime,
    /// resource `Quantity {string string = 1}` → JSON string.
    Quantity,
    /// intstr `IntOrString {int64 type = 1, int32 intVal = 2, string strVal = 3}` → JSON number
    /// for type 0, JSON string for type 1.
    IntOrString,
    /// A message whose `bytes raw = 1` holds JSON (runtime `RawExtension`, meta/v1 `FieldsV1`,
    /// apiextensions `JSON`) → that JSON; absent when empty.
    RawJson,
    /// A named `[]string` as a map value (authentication's `ExtraValue`),
    /// `{repeated string items = 1}` → JSON array of strings.
    StringList,
    /// A nested message → JSON object.
    Message(&'static Message),
    /// apiextensions `JSONSchemaPropsOrArray {schema = 1, repeated jSONSchemas = 2}` → the array
    /// of schemas when it has any, else the schema.
    SchemaOrArray(&'static Message),
    /// apiextensions `JSONSchemaPropsOrBool {bool allows = 1, schema = 2}` → the schema when
    /// there is one, else the boolean.
    SchemaOrBool(&'static Message),
    /// apiextensions `JSONSchemaPropsOrStringArray {schema = 1, repeated string property = 2}` →
    /// the strings when there are any, else the schema, else absent.
    SchemaOrStringArray(&'static Message),
}

impl Type {
    fn wire_type(self) -> u8 {
        match self {
            Type::Int64 | Type::Int32 | Type::Bool => WIRE_VARINT,
            Type::Double => WIRE_FIXED64,
            _ => WIRE_LEN,
        }
    }
}

/// How a field's value appears in JSON.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Presence {
    /// Go `omitempty` on a scalar value field: a zero value is left out.
    OmitZero,
    /// A pointer, a struct or a field without `omitempty`: present on the wire means present in
    /// JSON (a zero `Time` and an empty raw JSON value excepted, which Go writes as `null`).
    Keep,
    /// A repeated field: a JSON array of every occurrence, absent when there is none.
    List,
    /// A map (`map<string, T>`, entries `key = 1`, `value = 2`): a JSON object, absent when empty.
    Map,
    /// An embedded struct with `json:",inline"`: a nested message on the wire whose fields are
    /// the enclosing object's in JSON.
    Inline,
}

/// One field of a message; `ty` is the type of each item of a list and each value of a map.
pub(crate) struct Field {
    number: u32,
    pub(crate) json: &'static str,
    pub(crate) ty: Type,
    pub(crate) presence: Presence,
    /// Whether encoding/json writes the field even when it is unset (its zero value then): a
    /// non-pointer struct, or a value without `omitempty`.
    pub(crate) always: bool,
}

/// One message type: its name (for error messages) and its known fields, in the Go type's
/// declaration order.
pub(crate) struct Message {
    name: &'static str,
    pub(crate) fields: &'static [Field],
}

/// The message of the built-in kind `kind` of `api_version`, if there is one.
pub(crate) fn message_of(api_version: &str, kind: &str) -> Option<&'static Message> {
    KINDS
        .binary_search_by(|(v, k, _)| (*v, *k).cmp(&(api_version, kind)))
        .ok()
        .map(|at| KINDS[at].2)
}

/// A field whose zero value is omitted (Go `omitempty`).
const fn opt(number: u32, json: &'static str, ty: Type) -> Field {
    Field {
        number,
        json,
        ty,
        presence: Presence::OmitZero,
        always: false,
    }
}

/// A field written whenever it is on the wire (a pointer, a struct, or no `omitempty`).
const fn keep(number: u32, json: &'static str, ty: Type) -> Field {
    Field {
        number,
        json,
        ty,
        presence: Presence::Keep,
        always: false,
    }
}

/// A repeated field of items of `ty`.
const fn list(number: u32, json: &'static str, ty: Type) -> Field {
    Field {
        number,
        json,
        ty,
        presence: Presence::List,
        always: false,
    }
}

/// A map from strings to values of `ty`.
const fn map(number: u32, json: &'static str, ty: Type) -> Field {
    Field {
        number,
        json,
        ty,
        presence: Presence::Map,
        always: false,
    }
}

/// `field`, written by encoding/json even when unset.
const fn always(field: Field) -> Field {
    Field {
        always: true,
        ..field
    }
}

/// An embedded message whose fields are the enclosing object's in JSON.
const fn inline(number: u32, json: &'static str, ty: Type) -> Field {
    Field {
        number,
        json,
        ty,
        presence: Presence::Inline,
        always: false,
    }
}

// ---------------------------------------------------------------------------------------------
// The generic decoder
// ---------------------------------------------------------------------------------------------

/// Decodes the fields of one message into `out`, merging with what `out` already holds (as
/// protobuf merges a message that occurs more than once).
fn decode_message(
    bytes: &[u8],
    schema: &'static Message,
    depth: usize,
    out: &mut Map<String, Value>,
) -> Result<(), Error> {
    if depth > MAX_DEPTH {
        return Err(Error::TooDeep { max: MAX_DEPTH });
    }
    let mut reader = Reader::new(bytes, schema.name);
    while !reader.at_end() {
        let (number, wire_type) = reader.tag()?;
        match schema.fields.iter().find(|f| f.number == number) {
            Some(field) => decode_field(&mut reader, wire_type, schema, field, depth, out)?,
            None => reader.skip(number, wire_type)?,
        }
    }
    Ok(())
}

fn decode_field(
    reader: &mut Reader<'_>,
    wire_type: u8,
    schema: &'static Message,
    field: &Field,
    depth: usize,
    out: &mut Map<String, Value>,
) -> Result<(), Error> {
    let expected = match field.presence {
        Presence::Map | Presence::Inline => WIRE_LEN,
        _ => field.ty.wire_type(),
    };
    let packed = field.presence == Presence::List && expected != WIRE_LEN && wire_type == WIRE_LEN;
    if wire_type != expected && !packed {
        return Err(Error::WireTypeMismatch {
            message: schema.name,
            field: field.number,
            json: field.json,
            expected,
            found: wire_type,
        });
    }
    if packed {
        let mut items = Reader::new(reader.length_delimited()?, schema.name);
        while !items.at_end() {
            let value = read_value(&mut items, field.ty, schema.name, field.json, depth)?;
            push(out, field.json, value);
        }
        return Ok(());
    }
    match (field.presence, field.ty) {
        (Presence::Inline, Type::Message(inner)) => {
            decode_message(reader.length_delimited()?, inner, depth + 1, out)?;
        }
        (Presence::Inline, _) => reader.skip(field.number, wire_type)?,
        (Presence::Map, ty) => {
            let (key, value) =
                map_entry(reader.length_delimited()?, schema, field.json, ty, depth)?;
            if let Value::Object(map) = object_slot(out, field.json) {
                map.insert(key, value);
            }
        }
        (Presence::List, ty) => {
            let value = read_value(reader, ty, schema.name, field.json, depth)?;
            if !value.is_null() {
                push(out, field.json, value);
            }
        }
        (_, Type::Message(inner)) => {
            let bytes = reader.length_delimited()?;
            if let Value::Object(object) = object_slot(out, field.json) {
                decode_message(bytes, inner, depth + 1, object)?;
            }
        }
        (presence, ty) => {
            let value = read_value(reader, ty, schema.name, field.json, depth)?;
            let zero = match &value {
                Value::Null => true,
                Value::Bool(b) => !b,
                Value::String(s) => s.is_empty(),
                Value::Number(n) => n.as_f64() == Some(0.0),
                _ => false,
            };
            if value.is_null() || (presence == Presence::OmitZero && zero) {
                out.remove(field.json);
            } else {
                out.insert(field.json.to_string(), value);
            }
        }
    }
    Ok(())
}

/// Reads one value of type `ty` (its wire type already checked) as JSON; `Null` for a value
/// that Go writes as `null` (a zero time, empty raw JSON), which the caller leaves out.
fn read_value(
    reader: &mut Reader<'_>,
    ty: Type,
    message: &'static str,
    json: &'static str,
    depth: usize,
) -> Result<Value, Error> {
    Ok(match ty {
        Type::Int64 => Value::from(reader.varint()? as i64),
        // int32 values are sign-extended to 64 bits on the wire; keep the low 32 bits as Go does.
        Type::Int32 => Value::from(reader.varint()? as u32 as i32),
        Type::Bool => Value::Bool(reader.varint()? != 0),
        Type::Double => {
            let bytes = reader.take(8)?;
            let mut le = [0u8; 8];
            le.copy_from_slice(bytes);
            double(f64::from_le_bytes(le))
        }
        Type::Str => Value::String(utf8(reader.length_delimited()?, message, json)?),
        Type::Bytes => Value::String(
            base64::engine::general_purpose::STANDARD.encode(reader.length_delimited()?),
        ),
        Type::Time | Type::MicroTime => time(reader.length_delimited()?, ty, message, json, depth)?
            .map_or(Value::Null, Value::String),
        Type::Quantity => quantity(reader.length_delimited()?, message, json, depth)?,
        Type::IntOrString => int_or_string(reader.length_delimited()?, message, json, depth)?,
        Type::RawJson => raw_json(reader.length_delimited()?, message, json, depth)?,
        Type::StringList => string_list(reader.length_delimited()?, message, json, depth)?,
        Type::Message(inner) => {
            let mut object = Map::new();
            decode_message(reader.length_delimited()?, inner, depth + 1, &mut object)?;
            Value::Object(object)
        }
        Type::SchemaOrArray(props)
        | Type::SchemaOrBool(props)
        | Type::SchemaOrStringArray(props) => {
            schema_or(reader.length_delimited()?, ty, props, depth)?
        }
    })
}

/// A `double` as Go's encoding/json writes it: without a fraction it is an integer.
fn double(value: f64) -> Value {
    // Exactly representable integers up to 2^53 are written without a fraction by Go too.
    const EXACT: f64 = 9_007_199_254_740_992.0;
    if value.fract() == 0.0 && value.abs() <= EXACT {
        // Lossless: an integer of at most 2^53 in magnitude.
        Value::from(value as i64)
    } else {
        serde_json::Number::from_f64(value).map_or(Value::Null, Value::Number)
    }
}

/// The object at `out[json]`, made an empty object first when it is missing or not an object.
fn object_slot<'a>(out: &'a mut Map<String, Value>, json: &str) -> &'a mut Value {
    let slot = out.entry(json).or_insert_with(|| Value::Object(Map::new()));
    if !slot.is_object() {
        *slot = Value::Object(Map::new());
    }
    slot
}

fn push(out: &mut Map<String, Value>, json: &str, value: Value) {
    let slot = out.entry(json).or_insert_with(|| Value::Array(Vec::new()));
    if !slot.is_array() {
        *slot = Value::Array(Vec::new());
    }
    if let Value::Array(items) = slot {
        items.push(value);
    }
}

/// Reads the fields of a small message of a fixed shape (a map entry, a time, a wrapper type):
/// `known` lists its field numbers with their wire types and names, and `each` reads the value
/// of every known field met. Other field numbers are skipped.
fn small_message<'a>(
    bytes: &'a [u8],
    message: &'static str,
    depth: usize,
    known: &[(u32, u8, &'static str)],
    mut each: impl FnMut(u32, &mut Reader<'a>) -> Result<(), Error>,
) -> Result<(), Error> {
    if depth + 1 > MAX_DEPTH {
        return Err(Error::TooDeep { max: MAX_DEPTH });
    }
    let mut reader = Reader::new(bytes, message);
    while !reader.at_end() {
        let (number, wire_type) = reader.tag()?;
        match known.iter().find(|(known, _, _)| *known == number) {
            Some(&(_, expected, _)) if expected == wire_type => each(number, &mut reader)?,
            Some(&(_, expected, json)) => {
                return Err(Error::WireTypeMismatch {
                    message,
                    field: number,
                    json,
                    expected,
                    found: wire_type,
                });
            }
            None => reader.skip(number, wire_type)?,
        }
    }
    Ok(())
}

/// Reads one map entry (`key = 1`, `value = 2`); missing parts default to empty, as in Go.
fn map_entry(
    bytes: &[u8],
    schema: &'static Message,
    json: &'static str,
    ty: Type,
    depth: usize,
) -> Result<(String, Value), Error> {
    let mut key = String::new();
    let mut value = None;
    small_message(
        bytes,
        schema.name,
        depth,
        &[(1, WIRE_LEN, json), (2, ty.wire_type(), json)],
        |number, reader| {
            if number == 1 {
                key = utf8(reader.length_delimited()?, schema.name, json)?;
            } else {
                value = Some(read_value(reader, ty, schema.name, json, depth + 1)?);
            }
            Ok(())
        },
    )?;
    let value = value.unwrap_or_else(|| match ty {
        Type::Str | Type::Bytes => Value::String(String::new()),
        Type::Quantity => Value::String("0".into()),
        Type::StringList => Value::Array(Vec::new()),
        Type::Message(_) => Value::Object(Map::new()),
        Type::Int64 | Type::Int32 | Type::Double | Type::IntOrString => Value::from(0),
        Type::Bool => Value::Bool(false),
        _ => Value::Null,
    });
    Ok((key, value))
}

/// Reads an `ExtraValue {repeated string items = 1}` as a JSON array of strings.
fn string_list(
    bytes: &[u8],
    message: &'static str,
    json: &'static str,
    depth: usize,
) -> Result<Value, Error> {
    let mut items = Vec::new();
    small_message(
        bytes,
        "ExtraValue",
        depth,
        &[(1, WIRE_LEN, "items")],
        |_, reader| {
            items.push(Value::String(utf8(
                reader.length_delimited()?,
                message,
                json,
            )?));
            Ok(())
        },
    )?;
    Ok(Value::Array(items))
}

/// Reads a resource `Quantity {string string = 1}` as its JSON string (`"0"` when empty).
fn quantity(
    bytes: &[u8],
    message: &'static str,
    json: &'static str,
    depth: usize,
) -> Result<Value, Error> {
    let mut text = String::new();
    small_message(
        bytes,
        "Quantity",
        depth,
        &[(1, WIRE_LEN, "string")],
        |_, reader| {
            text = utf8(reader.length_delimited()?, message, json)?;
            Ok(())
        },
    )?;
    if text.is_empty() {
        text.push('0');
    }
    Ok(Value::String(text))
}

/// Reads an intstr `IntOrString` as a JSON number (type 0) or string (type 1).
fn int_or_string(
    bytes: &[u8],
    message: &'static str,
    json: &'static str,
    depth: usize,
) -> Result<Value, Error> {
    let (mut kind, mut int, mut text) = (0u64, 0i32, String::new());
    small_message(
        bytes,
        "IntOrString",
        depth,
        &[
            (1, WIRE_VARINT, "type"),
            (2, WIRE_VARINT, "intVal"),
            (3, WIRE_LEN, "strVal"),
        ],
        |number, reader| {
            match number {
                1 => kind = reader.varint()?,
                // int32 on the wire: keep the low 32 bits, as Go does.
                2 => int = reader.varint()? as u32 as i32,
                _ => text = utf8(reader.length_delimited()?, message, json)?,
            }
            Ok(())
        },
    )?;
    Ok(if kind == 1 {
        Value::String(text)
    } else {
        Value::from(int)
    })
}

/// Reads a message whose `bytes raw = 1` holds JSON; `Null` when it is empty.
fn raw_json(
    bytes: &[u8],
    message: &'static str,
    json: &'static str,
    depth: usize,
) -> Result<Value, Error> {
    let mut raw: &[u8] = &[];
    small_message(
        bytes,
        "RawExtension",
        depth,
        &[(1, WIRE_LEN, "raw")],
        |_, reader| {
            raw = reader.length_delimited()?;
            Ok(())
        },
    )?;
    if raw.is_empty() {
        return Ok(Value::Null);
    }
    serde_json::from_slice(raw).map_err(|_| Error::InvalidJson { message, json })
}

/// Reads an apiextensions `JSONSchemaPropsOrArray`, `JSONSchemaPropsOrBool` or
/// `JSONSchemaPropsOrStringArray` as the JSON its MarshalJSON writes.
fn schema_or(
    bytes: &[u8],
    ty: Type,
    props: &'static Message,
    depth: usize,
) -> Result<Value, Error> {
    let (name, known): (&'static str, [(u32, u8, &'static str); 2]) = match ty {
        Type::SchemaOrArray(_) => (
            "JSONSchemaPropsOrArray",
            [(1, WIRE_LEN, "schema"), (2, WIRE_LEN, "jSONSchemas")],
        ),
        Type::SchemaOrBool(_) => (
            "JSONSchemaPropsOrBool",
            [(1, WIRE_VARINT, "allows"), (2, WIRE_LEN, "schema")],
        ),
        _ => (
            "JSONSchemaPropsOrStringArray",
            [(1, WIRE_LEN, "schema"), (2, WIRE_LEN, "property")],
        ),
    };
    let schema_field = if matches!(ty, Type::SchemaOrBool(_)) {
        2
    } else {
        1
    };
    let mut schema: Option<Map<String, Value>> = None;
    let mut items = Vec::new();
    let mut allows = false;
    small_message(bytes, name, depth, &known, |number, reader| {
        if number == schema_field {
            let object = schema.get_or_insert_with(Map::new);
            decode_message(reader.length_delimited()?, props, depth + 2, object)
        } else if matches!(ty, Type::SchemaOrBool(_)) {
            allows = reader.varint()? != 0;
            Ok(())
        } else if matches!(ty, Type::SchemaOrArray(_)) {
            let mut object = Map::new();
            decode_message(reader.length_delimited()?, props, depth + 2, &mut object)?;
            items.push(Value::Object(object));
            Ok(())
        } else {
            let text = utf8(reader.length_delimited()?, name, "property")?;
            items.push(Value::String(text));
            Ok(())
        }
    })?;
    Ok(match (ty, schema) {
        (Type::SchemaOrBool(_), Some(schema)) => Value::Object(schema),
        (Type::SchemaOrBool(_), None) => Value::Bool(allows),
        (_, _) if !items.is_empty() => Value::Array(items),
        (_, Some(schema)) => Value::Object(schema),
        (_, None) => Value::Null,
    })
}

/// Reads a meta/v1 `Time` or `MicroTime` (both `{int64 seconds = 1; int32 nanos = 2}`) as
/// RFC 3339 in UTC: at second precision for `Time`, as metav1.Time writes JSON; with exactly six
/// fractional digits for `MicroTime`, truncating the nanoseconds as metav1.MicroTime writes JSON.
/// `None` for the zero time, which Go encodes as an empty message.
fn time(
    bytes: &[u8],
    ty: Type,
    message: &'static str,
    json: &'static str,
    depth: usize,
) -> Result<Option<String>, Error> {
    let micro = matches!(ty, Type::MicroTime);
    let name = if micro { "MicroTime" } else { "Time" };
    let mut seconds = None;
    let mut nanos = 0i32;
    small_message(
        bytes,
        name,
        depth,
        &[(1, WIRE_VARINT, "seconds"), (2, WIRE_VARINT, "nanos")],
        |number, reader| {
            if number == 1 {
                seconds = Some(reader.varint()? as i64);
            } else {
                // int32 on the wire: keep the low 32 bits, as Go does.
                nanos = reader.varint()? as u32 as i32;
            }
            Ok(())
        },
    )?;
    if bytes.is_empty() {
        return Ok(None);
    }
    // A `Time`'s nanoseconds are dropped: its JSON form has second precision. A `MicroTime`'s
    // are normalized into [0, 1s) as Go's time.Unix does.
    let nanos = if micro { nanos } else { 0 };
    let seconds = seconds
        .unwrap_or(0)
        .saturating_add(i64::from(nanos.div_euclid(NANOS_PER_SECOND)));
    let nanos = nanos.rem_euclid(NANOS_PER_SECOND);
    if seconds == GO_ZERO_TIME_SECONDS && nanos == 0 {
        return Ok(None);
    }
    let out_of_range = Error::InvalidTimestamp {
        message,
        json,
        seconds,
    };
    if !(GO_ZERO_TIME_SECONDS..=MAX_TIME_SECONDS).contains(&seconds) {
        return Err(out_of_range);
    }
    // Lossless: normalized into [0, 1s) above.
    let stamp = chrono::DateTime::from_timestamp(seconds, nanos as u32).ok_or(out_of_range)?;
    let precision = if micro {
        // chrono writes the six digits truncated, not rounded, as Go's time.Format does.
        chrono::SecondsFormat::Micros
    } else {
        chrono::SecondsFormat::Secs
    };
    Ok(Some(stamp.to_rfc3339_opts(precision, true)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    // A tiny encoder for hand-built bodies -------------------------------------------------------

    #[derive(Default)]
    struct Enc(Vec<u8>);

    fn put_varint(out: &mut Vec<u8>, mut value: u64) {
        loop {
            let low = (value & 0x7f) as u8;
            value >>= 7;
            if value == 0 {
                out.push(low);
                return;
            }
            out.push(low | 0x80);
        }
    }

    impl Enc {
        fn tag(mut self, field: u32, wire_type: u8) -> Self {
            put_varint(&mut self.0, (u64::from(field) << 3) | u64::from(wire_type));
            self
        }

        fn varint(self, field: u32, value: u64) -> Self {
            let mut enc = self.tag(field, WIRE_VARINT);
            put_varint(&mut enc.0, value);
            enc
        }

        fn bytes(self, field: u32, value: &[u8]) -> Self {
            let mut enc = self.tag(field, WIRE_LEN);
            put_varint(&mut enc.0, value.len() as u64);
            enc.0.extend_from_slice(value);
            enc
        }

        fn str(self, field: u32, value: &str) -> Self {
            self.bytes(field, value.as_bytes())
        }

        fn msg(self, field: u32, value: Enc) -> Self {
            self.bytes(field, &value.0)
        }

        fn entry(self, field: u32, key: &str, value: &[u8]) -> Self {
            self.msg(field, Enc::default().str(1, key).bytes(2, value))
        }

        fn fixed(self, field: u32, wire_type: u8, width: usize) -> Self {
            let mut enc = self.tag(field, wire_type);
            enc.0.extend(std::iter::repeat_n(0xab, width));
            enc
        }
    }

    fn envelope(api_version: &str, kind: &str, raw: Enc) -> Vec<u8> {
        let type_meta = Enc::default().str(1, api_version).str(2, kind);
        let unknown = Enc::default()
            .msg(1, type_meta)
            .msg(2, raw)
            .str(3, "")
            .str(4, "");
        let mut body = MAGIC.to_vec();
        body.extend_from_slice(&unknown.0);
        body
    }

    /// An ObjectMeta as Go writes it: every plain string and the generation, even when empty.
    fn meta(name: &str, namespace: &str) -> Enc {
        Enc::default()
            .str(1, name)
            .str(2, "")
            .str(3, namespace)
            .str(4, "")
            .str(5, "")
            .str(6, "")
            .varint(7, 0)
            .msg(8, Enc::default())
    }

    // Hand-built bodies ---------------------------------------------------------------------------

    #[test]
    fn a_self_subject_access_review_for_a_resource_decodes_to_its_json_form() {
        let attributes = Enc::default()
            .str(1, "team-a")
            .str(2, "delete")
            .str(3, "apps")
            .str(4, "v1")
            .str(5, "deployments")
            .str(6, "scale")
            .str(7, "web");
        let raw = Enc::default()
            .msg(1, meta("", ""))
            .msg(2, Enc::default().msg(1, attributes))
            .msg(
                3,
                Enc::default()
                    .varint(1, 0)
                    .str(2, "")
                    .str(3, "")
                    .varint(4, 0),
            );
        let body = envelope("authorization.k8s.io/v1", "SelfSubjectAccessReview", raw);
        assert_eq!(
            decode(&body).unwrap(),
            json!({
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SelfSubjectAccessReview",
                "metadata": {},
                "spec": {"resourceAttributes": {
                    "namespace": "team-a", "verb": "delete", "group": "apps", "version": "v1",
                    "resource": "deployments", "subresource": "scale", "name": "web"}},
                "status": {"allowed": false}
            })
        );
    }

    #[test]
    fn a_self_subject_access_review_for_a_path_has_only_non_resource_attributes() {
        let raw = Enc::default().msg(1, meta("", "")).msg(
            2,
            Enc::default().msg(2, Enc::default().str(1, "/metrics").str(2, "get")),
        );
        let body = envelope("authorization.k8s.io/v1", "SelfSubjectAccessReview", raw);
        let value = decode(&body).unwrap();
        assert_eq!(
            value["spec"],
            json!({"nonResourceAttributes": {"path": "/metrics", "verb": "get"}})
        );
        assert!(value["spec"].get("resourceAttributes").is_none());
    }

    #[test]
    fn a_subject_access_review_carries_user_groups_uid_extra_and_selectors() {
        let field_selector = Enc::default().str(1, "spec.nodeName=n1").msg(
            2,
            Enc::default()
                .str(1, "spec.nodeName")
                .str(2, "In")
                .str(3, "n1"),
        );
        let label_selector = Enc::default().msg(2, Enc::default().str(1, "app").str(2, "Exists"));
        let attributes = Enc::default()
            .str(2, "list")
            .str(5, "pods")
            .msg(8, field_selector)
            .msg(9, label_selector);
        let extra = Enc::default()
            .str(1, "scopes")
            .msg(2, Enc::default().str(1, "read").str(1, "write"));
        let spec = Enc::default()
            .msg(1, attributes)
            .str(3, "alice")
            .str(4, "dev")
            .str(4, "ops")
            .msg(5, extra)
            .str(6, "uid-1");
        let raw = Enc::default().msg(1, meta("", "")).msg(2, spec);
        for kind in ["SubjectAccessReview", "LocalSubjectAccessReview"] {
            let value =
                decode(&envelope("authorization.k8s.io/v1", kind, raw_clone(&raw))).unwrap();
            assert_eq!(value["kind"], kind);
            assert_eq!(
                value["spec"],
                json!({
                    "resourceAttributes": {
                        "verb": "list", "resource": "pods",
                        "fieldSelector": {"rawSelector": "spec.nodeName=n1", "requirements": [
                            {"key": "spec.nodeName", "operator": "In", "values": ["n1"]}]},
                        "labelSelector": {"requirements": [{"key": "app", "operator": "Exists"}]}
                    },
                    "user": "alice",
                    "groups": ["dev", "ops"],
                    "extra": {"scopes": ["read", "write"]},
                    "uid": "uid-1"
                })
            );
        }
    }

    fn raw_clone(enc: &Enc) -> Enc {
        Enc(enc.0.clone())
    }

    #[test]
    fn a_token_request_keeps_expiration_seconds_audiences_and_bound_object() {
        let spec = Enc::default()
            .str(1, "api")
            .str(1, "vault")
            .msg(
                3,
                Enc::default()
                    .str(1, "Pod")
                    .str(2, "v1")
                    .str(3, "p1")
                    .str(4, "u-1"),
            )
            .varint(4, 7200);
        let raw = Enc::default()
            .msg(1, meta("", ""))
            .msg(2, spec)
            .msg(3, Enc::default().str(1, "").msg(2, Enc::default()));
        let body = envelope("authentication.k8s.io/v1", "TokenRequest", raw);
        assert_eq!(
            decode(&body).unwrap(),
            json!({
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenRequest",
                "metadata": {},
                "spec": {
                    "audiences": ["api", "vault"],
                    "boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": "p1", "uid": "u-1"},
                    "expirationSeconds": 7200
                },
                "status": {"token": ""}
            })
        );
    }

    #[test]
    fn a_config_map_decodes_data_binary_data_as_base64_labels_and_immutable() {
        let metadata = meta("settings", "team-a")
            .entry(11, "app", b"web")
            .entry(11, "tier", b"front")
            .entry(12, "note", b"hi");
        let raw = Enc::default()
            .msg(1, metadata)
            .entry(2, "a", b"1")
            .entry(2, "b", b"")
            .entry(3, "blob", &[0xff, 0x00, 0x10])
            .varint(4, 0);
        let body = envelope("v1", "ConfigMap", raw);
        assert_eq!(
            decode(&body).unwrap(),
            json!({
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {
                    "name": "settings",
                    "namespace": "team-a",
                    "labels": {"app": "web", "tier": "front"},
                    "annotations": {"note": "hi"}
                },
                "data": {"a": "1", "b": ""},
                "binaryData": {"blob": "/wAQ"},
                "immutable": false
            })
        );
    }

    #[test]
    fn object_meta_keeps_owner_references_finalizers_and_timestamps() {
        let owner = Enc::default()
            .str(1, "Deployment")
            .str(3, "web")
            .str(4, "uid-9")
            .str(5, "apps/v1")
            .varint(6, 1)
            .varint(7, 0);
        let metadata = Enc::default()
            .str(1, "web-1")
            .str(5, "uid-2")
            .str(6, "42")
            .varint(7, 3)
            .msg(8, Enc::default().varint(1, 1_700_000_000).varint(2, 500))
            .msg(9, Enc::default().varint(1, 0).varint(2, 0))
            .varint(10, 30)
            .msg(13, owner)
            .str(14, "example.com/cleanup")
            .str(14, "kubernetes");
        let raw = Enc::default().msg(1, metadata);
        let value = decode(&envelope("v1", "ConfigMap", raw)).unwrap();
        assert_eq!(
            value["metadata"],
            json!({
                "name": "web-1",
                "uid": "uid-2",
                "resourceVersion": "42",
                "generation": 3,
                "creationTimestamp": "2023-11-14T22:13:20Z",
                "deletionTimestamp": "1970-01-01T00:00:00Z",
                "deletionGracePeriodSeconds": 30,
                "ownerReferences": [{
                    "apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "uid-9",
                    "controller": true, "blockOwnerDeletion": false
                }],
                "finalizers": ["example.com/cleanup", "kubernetes"]
            })
        );
    }

    #[test]
    fn a_role_binding_decodes_subjects_and_role_ref() {
        let raw = Enc::default()
            .msg(1, meta("rb", "team-a"))
            .msg(
                2,
                Enc::default()
                    .str(1, "User")
                    .str(2, "rbac.authorization.k8s.io")
                    .str(3, "alice")
                    .str(4, ""),
            )
            .msg(
                2,
                Enc::default()
                    .str(1, "ServiceAccount")
                    .str(2, "")
                    .str(3, "bot")
                    .str(4, "team-a"),
            )
            .msg(
                3,
                Enc::default()
                    .str(1, "rbac.authorization.k8s.io")
                    .str(2, "Role")
                    .str(3, "reader"),
            );
        let body = envelope("rbac.authorization.k8s.io/v1", "RoleBinding", raw);
        assert_eq!(
            decode(&body).unwrap(),
            json!({
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": {"name": "rb", "namespace": "team-a"},
                "subjects": [
                    {"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "alice"},
                    {"kind": "ServiceAccount", "name": "bot", "namespace": "team-a"}
                ],
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "reader"}
            })
        );
    }

    #[test]
    fn a_cluster_role_keeps_an_empty_api_group_and_its_aggregation_rule() {
        let rule = Enc::default()
            .str(1, "get")
            .str(2, "")
            .str(3, "pods")
            .str(4, "p1");
        let selector = Enc::default()
            .entry(1, "rbac.example.com/aggregate", b"true")
            .msg(
                2,
                Enc::default()
                    .str(1, "tier")
                    .str(2, "In")
                    .str(3, "a")
                    .str(3, "b"),
            );
        let raw = Enc::default()
            .msg(1, meta("viewer", ""))
            .msg(2, rule)
            .msg(3, Enc::default().msg(1, selector));
        let value = decode(&envelope(
            "rbac.authorization.k8s.io/v1",
            "ClusterRole",
            raw,
        ))
        .unwrap();
        assert_eq!(
            value["rules"],
            json!([{"verbs": ["get"], "apiGroups": [""], "resources": ["pods"], "resourceNames": ["p1"]}])
        );
        assert_eq!(
            value["aggregationRule"],
            json!({"clusterRoleSelectors": [{
                "matchLabels": {"rbac.example.com/aggregate": "true"},
                "matchExpressions": [{"key": "tier", "operator": "In", "values": ["a", "b"]}]
            }]})
        );
    }

    #[test]
    fn a_secret_decodes_data_as_base64_and_keeps_string_data_type_and_immutable() {
        let raw = Enc::default()
            .msg(1, meta("creds", "team-a"))
            .entry(2, "password", b"s3cret")
            .str(3, "Opaque")
            .entry(4, "user", b"admin")
            .varint(5, 1);
        let value = decode(&envelope("v1", "Secret", raw)).unwrap();
        assert_eq!(value["data"], json!({"password": "czNjcmV0"}));
        assert_eq!(value["stringData"], json!({"user": "admin"}));
        assert_eq!(value["type"], "Opaque");
        assert_eq!(value["immutable"], true);
    }

    #[test]
    fn a_service_account_keeps_its_secrets_pull_secrets_and_automount() {
        let raw = Enc::default()
            .msg(1, meta("bot", "team-a"))
            .msg(2, Enc::default().str(3, "bot-token"))
            .msg(3, Enc::default().str(1, "registry"))
            .varint(4, 0);
        let value = decode(&envelope("v1", "ServiceAccount", raw)).unwrap();
        assert_eq!(value["secrets"], json!([{"name": "bot-token"}]));
        assert_eq!(value["imagePullSecrets"], json!([{"name": "registry"}]));
        assert_eq!(value["automountServiceAccountToken"], false);
    }

    #[test]
    fn a_namespace_keeps_its_spec_finalizers() {
        let raw = Enc::default()
            .msg(1, meta("team-b", ""))
            .msg(2, Enc::default().str(1, "kubernetes"))
            .msg(3, Enc::default().str(1, ""));
        let value = decode(&envelope("v1", "Namespace", raw)).unwrap();
        assert_eq!(
            value,
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-b"},
                   "spec": {"finalizers": ["kubernetes"]}, "status": {}})
        );
    }

    /// A meta/v1 `Time` or `MicroTime` message: seconds and nanos.
    fn stamp(seconds: i64, nanos: i32) -> Enc {
        Enc::default()
            .varint(1, seconds as u64)
            .varint(2, i64::from(nanos) as u64)
    }

    #[test]
    fn a_lease_with_every_spec_field_set_decodes_to_the_json_client_go_sends() {
        let spec = Enc::default()
            .str(1, "host-a_0f3c")
            .varint(2, 15)
            .msg(3, stamp(1_795_680_270, 123_456_789))
            .msg(4, stamp(1_795_680_285, 123_456_000))
            .varint(5, 0)
            .str(6, "OldestEmulationVersion")
            .str(7, "host-b_77d1");
        let raw = Enc::default()
            .msg(
                1,
                meta("memcached-operator-lock", "memcached-operator-system"),
            )
            .msg(2, spec);
        let body = envelope("coordination.k8s.io/v1", "Lease", raw);
        assert_eq!(
            decode(&body).unwrap(),
            json!({
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {
                    "name": "memcached-operator-lock",
                    "namespace": "memcached-operator-system"
                },
                "spec": {
                    "holderIdentity": "host-a_0f3c",
                    "leaseDurationSeconds": 15,
                    "acquireTime": "2026-11-26T08:04:30.123456Z",
                    "renewTime": "2026-11-26T08:04:45.123456Z",
                    "leaseTransitions": 0,
                    "strategy": "OldestEmulationVersion",
                    "preferredHolder": "host-b_77d1"
                }
            })
        );
    }

    #[test]
    fn delete_options_keep_a_zero_grace_period_and_carry_preconditions() {
        let raw = Enc::default()
            .varint(1, 0)
            .msg(2, Enc::default().str(1, "6f1c").str(2, "42"))
            .str(4, "Background")
            .str(5, "All");
        let value = decode(&envelope("v1", "DeleteOptions", raw)).unwrap();
        assert_eq!(
            value,
            json!({"apiVersion": "v1", "kind": "DeleteOptions",
                   "gracePeriodSeconds": 0,
                   "preconditions": {"uid": "6f1c", "resourceVersion": "42"},
                   "propagationPolicy": "Background",
                   "dryRun": ["All"]})
        );
        let value = decode(&envelope("v1", "DeleteOptions", Enc::default())).unwrap();
        assert_eq!(value, json!({"apiVersion": "v1", "kind": "DeleteOptions"}));
    }

    #[test]
    fn a_lease_with_only_a_holder_identity_has_only_that_in_its_spec() {
        let raw = Enc::default()
            .msg(1, meta("lock", "default"))
            .msg(2, Enc::default().str(1, "host-a_0f3c"));
        let value = decode(&envelope("coordination.k8s.io/v1", "Lease", raw)).unwrap();
        assert_eq!(
            value,
            json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                   "metadata": {"name": "lock", "namespace": "default"},
                   "spec": {"holderIdentity": "host-a_0f3c"}})
        );

        // A released lease: the pointer to an empty string is still on the wire, and kept.
        let raw = Enc::default()
            .msg(1, meta("lock", "default"))
            .msg(2, Enc::default().str(1, ""));
        let value = decode(&envelope("coordination.k8s.io/v1", "Lease", raw)).unwrap();
        assert_eq!(value["spec"], json!({"holderIdentity": ""}));
    }

    #[test]
    fn micro_time_has_six_fractional_digits_truncating_nanoseconds() {
        let renew_time = |stamp: Enc| {
            let mut out = Map::new();
            decode_message(
                &Enc::default().msg(4, stamp).0,
                &schema::COORDINATION_V1_LEASE_SPEC,
                0,
                &mut out,
            )
            .map(|()| out.get("renewTime").cloned())
        };
        let at = |text: &str| Ok(Some(json!(text)));
        let base = 1_795_680_285;
        assert_eq!(
            renew_time(stamp(base, 0)),
            at("2026-11-26T08:04:45.000000Z")
        );
        assert_eq!(
            renew_time(stamp(base, 999)),
            at("2026-11-26T08:04:45.000000Z")
        );
        assert_eq!(
            renew_time(stamp(base, 999_999_999)),
            at("2026-11-26T08:04:45.999999Z")
        );
        assert_eq!(
            renew_time(stamp(base, 1_000)),
            at("2026-11-26T08:04:45.000001Z")
        );
        // Nanos outside [0, 1s) carry into the seconds, as Go's time.Unix does.
        assert_eq!(
            renew_time(stamp(base, 1_500_000_000)),
            at("2026-11-26T08:04:46.500000Z")
        );
        assert_eq!(
            renew_time(stamp(base, -1)),
            at("2026-11-26T08:04:44.999999Z")
        );
        // Seconds alone, and the extremes RFC 3339 can write.
        assert_eq!(
            renew_time(Enc::default().varint(1, base as u64)),
            at("2026-11-26T08:04:45.000000Z")
        );
        assert_eq!(
            renew_time(stamp(MAX_TIME_SECONDS, 999_999_999)),
            at("9999-12-31T23:59:59.999999Z")
        );
        assert_eq!(
            renew_time(stamp(GO_ZERO_TIME_SECONDS, 1_000)),
            at("0001-01-01T00:00:00.000001Z")
        );
        // The zero time (an empty message, or Go's zero instant) is omitted.
        assert_eq!(renew_time(Enc::default()), Ok(None));
        assert_eq!(renew_time(stamp(GO_ZERO_TIME_SECONDS, 0)), Ok(None));
        assert_eq!(
            renew_time(stamp(MAX_TIME_SECONDS, 1_000_000_000)),
            Err(Error::InvalidTimestamp {
                message: "LeaseSpec",
                json: "renewTime",
                seconds: MAX_TIME_SECONDS + 1
            })
        );
        assert_eq!(
            renew_time(Enc::default().str(2, "x")),
            Err(Error::WireTypeMismatch {
                message: "MicroTime",
                field: 2,
                json: "nanos",
                expected: WIRE_VARINT,
                found: WIRE_LEN
            })
        );
    }

    #[test]
    fn a_core_event_keeps_its_reporting_fields_and_omits_a_zero_event_time() {
        let involved = Enc::default()
            .str(1, "Memcached")
            .str(2, "default")
            .str(3, "cache")
            .str(4, "uid-7")
            .str(5, "cache.example.com/v1alpha1")
            .str(6, "812")
            .str(7, "");
        let raw = Enc::default()
            .msg(1, meta("cache.1879a2b3c4d5e6f7", "default"))
            .msg(2, involved)
            .str(3, "Scaled")
            .str(4, "scaled to 3 replicas")
            .msg(5, Enc::default().str(1, "memcached-operator").str(2, ""))
            .msg(6, stamp(1_795_683_600, 250_000_000))
            .msg(7, stamp(1_795_683_610, 0))
            .varint(8, 2)
            .str(9, "Normal")
            .msg(10, Enc::default())
            .str(12, "")
            .str(14, "memcached-operator")
            .str(15, "");
        let body = envelope("v1", "Event", raw);
        assert_eq!(
            decode(&body).unwrap(),
            json!({
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {"name": "cache.1879a2b3c4d5e6f7", "namespace": "default"},
                "involvedObject": {
                    "kind": "Memcached", "namespace": "default", "name": "cache", "uid": "uid-7",
                    "apiVersion": "cache.example.com/v1alpha1", "resourceVersion": "812"
                },
                "reason": "Scaled",
                "message": "scaled to 3 replicas",
                "source": {"component": "memcached-operator"},
                "firstTimestamp": "2026-11-26T09:00:00Z",
                "lastTimestamp": "2026-11-26T09:00:10Z",
                "count": 2,
                "type": "Normal",
                "reportingComponent": "memcached-operator",
                "reportingInstance": ""
            })
        );

        let raw = Enc::default()
            .msg(1, meta("cache.2", "default"))
            .msg(10, stamp(1_795_683_600, 7_654_321))
            .msg(
                11,
                Enc::default().varint(1, 0).msg(2, stamp(1_795_683_610, 0)),
            )
            .msg(13, Enc::default().str(1, "Pod").str(3, "cache-0"));
        let value = decode(&envelope("v1", "Event", raw)).unwrap();
        assert_eq!(value["eventTime"], "2026-11-26T09:00:00.007654Z");
        assert_eq!(
            value["series"],
            json!({"lastObservedTime": "2026-11-26T09:00:10.000000Z"})
        );
        assert_eq!(value["related"], json!({"kind": "Pod", "name": "cache-0"}));
    }

    #[test]
    fn an_events_k8s_io_event_decodes_regarding_series_note_and_deprecated_fields() {
        let regarding = Enc::default()
            .str(1, "Memcached")
            .str(2, "default")
            .str(3, "cache")
            .str(4, "uid-7")
            .str(5, "cache.example.com/v1alpha1")
            .str(6, "")
            .str(7, "");
        let raw = Enc::default()
            .msg(1, meta("cache.1879a2b3c4d5e6f8", "default"))
            .msg(2, stamp(1_795_680_285, 123_456_789))
            .msg(
                3,
                Enc::default()
                    .varint(1, 0)
                    .msg(2, stamp(1_795_680_300, 5_000)),
            )
            .str(4, "memcached-operator")
            .str(5, "memcached-operator-7d9f-host-a")
            .str(6, "Reconcile")
            .str(7, "Scaled")
            .msg(8, regarding)
            .msg(9, Enc::default().str(1, "Deployment").str(3, "cache"))
            .str(10, "scaled to 3 replicas")
            .str(11, "Normal")
            .msg(12, Enc::default().str(1, "").str(2, ""))
            .msg(13, Enc::default())
            .msg(14, Enc::default())
            .varint(15, 0);
        let body = envelope("events.k8s.io/v1", "Event", raw);
        assert_eq!(
            decode(&body).unwrap(),
            json!({
                "apiVersion": "events.k8s.io/v1",
                "kind": "Event",
                "metadata": {"name": "cache.1879a2b3c4d5e6f8", "namespace": "default"},
                "eventTime": "2026-11-26T08:04:45.123456Z",
                "series": {"count": 0, "lastObservedTime": "2026-11-26T08:05:00.000005Z"},
                "reportingController": "memcached-operator",
                "reportingInstance": "memcached-operator-7d9f-host-a",
                "action": "Reconcile",
                "reason": "Scaled",
                "regarding": {
                    "kind": "Memcached", "namespace": "default", "name": "cache", "uid": "uid-7",
                    "apiVersion": "cache.example.com/v1alpha1"
                },
                "related": {"kind": "Deployment", "name": "cache"},
                "note": "scaled to 3 replicas",
                "type": "Normal",
                "deprecatedSource": {}
            })
        );

        let raw = Enc::default()
            .msg(1, meta("old", "default"))
            .msg(2, Enc::default())
            .msg(12, Enc::default().str(1, "kubelet").str(2, "node-1"))
            .msg(13, stamp(1_795_683_600, 999_999_999))
            .msg(14, stamp(1_795_683_610, 0))
            .varint(15, 4);
        let value = decode(&envelope("events.k8s.io/v1", "Event", raw)).unwrap();
        assert_eq!(
            value,
            json!({"apiVersion": "events.k8s.io/v1", "kind": "Event",
                   "metadata": {"name": "old", "namespace": "default"},
                   "deprecatedSource": {"component": "kubelet", "host": "node-1"},
                   "deprecatedFirstTimestamp": "2026-11-26T09:00:00Z",
                   "deprecatedLastTimestamp": "2026-11-26T09:00:10Z",
                   "deprecatedCount": 4})
        );
    }

    #[test]
    fn unknown_fields_of_every_skippable_wire_type_are_skipped() {
        let metadata = meta("x", "default")
            .varint(99, 12345)
            .fixed(100, WIRE_FIXED64, 8)
            .str(101, "ignored")
            .fixed(102, WIRE_FIXED32, 4)
            .msg(103, Enc::default().str(1, "ignored"));
        let raw = Enc::default()
            .fixed(50, WIRE_FIXED32, 4)
            .msg(1, metadata)
            .entry(2, "a", b"b")
            .varint(1000, u64::MAX);
        let value = decode(&envelope("v1", "ConfigMap", raw)).unwrap();
        assert_eq!(
            value,
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "x", "namespace": "default"}, "data": {"a": "b"}})
        );
    }

    #[test]
    fn unknown_fields_of_the_envelope_are_skipped() {
        let mut body = envelope("v1", "ConfigMap", Enc::default().msg(1, meta("x", "")));
        body.extend_from_slice(&Enc::default().varint(9, 1).str(10, "later").0);
        assert_eq!(decode(&body).unwrap()["metadata"], json!({"name": "x"}));
    }

    #[test]
    fn a_later_scalar_overrides_an_earlier_one_and_a_repeated_message_merges() {
        let raw = Enc::default()
            .msg(1, meta("first", ""))
            .msg(1, Enc::default().str(1, "second").str(3, "ns"))
            .msg(1, Enc::default().str(3, ""));
        let value = decode(&envelope("v1", "ConfigMap", raw)).unwrap();
        assert_eq!(value["metadata"], json!({"name": "second"}));
    }

    // Malformed bodies ----------------------------------------------------------------------------

    #[test]
    fn a_body_without_the_magic_is_rejected() {
        let mut body = envelope("v1", "ConfigMap", Enc::default());
        body[0] = b'K';
        assert_eq!(decode(&body), Err(Error::MissingMagic));
        assert_eq!(decode(b""), Err(Error::MissingMagic));
        assert_eq!(
            decode(b"{\"kind\":\"ConfigMap\"}"),
            Err(Error::MissingMagic)
        );
    }

    #[test]
    fn an_unknown_kind_is_rejected_with_a_message_pointing_to_json() {
        // A custom resource: its schema is not built in, so only its JSON form is served.
        let body = envelope(
            "cache.example.com/v1alpha1",
            "Memcached",
            Enc::default().msg(1, meta("web", "")),
        );
        let error = decode(&body).unwrap_err();
        assert_eq!(
            error,
            Error::UnsupportedKind {
                api_version: "cache.example.com/v1alpha1".into(),
                kind: "Memcached".into()
            }
        );
        let message = error.to_string();
        assert!(
            message.contains("Memcached") && message.contains("only as json"),
            "{message}"
        );
        assert!(message.starts_with(char::is_lowercase), "{message}");
    }

    #[test]
    fn a_deployment_decodes_now_that_every_built_in_kind_has_a_schema() {
        let body = envelope(
            "apps/v1",
            "Deployment",
            Enc::default().msg(1, meta("web", "")),
        );
        assert_eq!(
            decode(&body),
            Ok(json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}}))
        );
    }

    #[test]
    fn the_kinds_are_sorted_for_the_binary_search() {
        for pair in KINDS.windows(2) {
            assert!(
                (pair[0].0, pair[0].1) < (pair[1].0, pair[1].1),
                "{} {}",
                pair[1].0,
                pair[1].1
            );
        }
    }

    #[test]
    fn a_known_kind_under_another_api_version_is_unsupported() {
        let body = envelope("rbac.authorization.k8s.io/v1beta1", "Role", Enc::default());
        assert!(matches!(decode(&body), Err(Error::UnsupportedKind { .. })));
    }

    #[test]
    fn every_truncation_of_a_body_is_an_error_or_a_prefix_decode_never_a_panic() {
        let body = envelope(
            "v1",
            "ConfigMap",
            Enc::default()
                .msg(1, meta("x", "default"))
                .entry(2, "a", b"b"),
        );
        for len in 0..body.len() {
            let _ = decode(&body[..len]);
        }
        assert!(matches!(
            decode(&body[..body.len() - 3]),
            Err(Error::Truncated { .. })
        ));
        assert!(matches!(
            decode(&REAL[2].1[..40]),
            Err(Error::Truncated { .. })
        ));
    }

    #[test]
    fn a_length_prefix_past_the_end_of_the_message_is_truncation() {
        let mut raw = Enc::default().tag(1, WIRE_LEN);
        put_varint(&mut raw.0, u64::MAX);
        let body = envelope("v1", "ConfigMap", raw);
        assert_eq!(
            decode(&body),
            Err(Error::Truncated {
                message: "ConfigMap"
            })
        );
    }

    #[test]
    fn an_overlong_varint_is_rejected() {
        let mut raw = Enc::default().tag(7, WIRE_VARINT);
        raw.0.extend_from_slice(&[0xff; 11]);
        let body = envelope("v1", "ConfigMap", Enc::default().msg(1, raw));
        assert_eq!(
            decode(&body),
            Err(Error::BadVarint {
                message: "ObjectMeta"
            })
        );
    }

    #[test]
    fn group_wire_types_and_field_number_zero_are_rejected() {
        for wire_type in [3, 4, 6, 7] {
            let body = envelope("v1", "ConfigMap", Enc::default().tag(60, wire_type));
            assert_eq!(
                decode(&body),
                Err(Error::UnsupportedWireType {
                    message: "ConfigMap",
                    field: 60,
                    wire_type
                })
            );
        }
        let body = envelope("v1", "ConfigMap", Enc::default().varint(0, 1));
        assert!(matches!(
            decode(&body),
            Err(Error::BadFieldNumber { number: 0, .. })
        ));
    }

    #[test]
    fn a_known_field_with_the_wrong_wire_type_is_rejected() {
        let body = envelope("v1", "ConfigMap", Enc::default().varint(1, 5));
        assert!(matches!(
            decode(&body),
            Err(Error::WireTypeMismatch {
                field: 1,
                json: "metadata",
                ..
            })
        ));
    }

    #[test]
    fn a_string_that_is_not_utf8_is_rejected() {
        let raw = Enc::default().msg(1, Enc::default().bytes(1, &[0xc3, 0x28]));
        assert!(matches!(
            decode(&envelope("v1", "ConfigMap", raw)),
            Err(Error::InvalidUtf8 { json: "name", .. })
        ));
    }

    #[test]
    fn a_raw_json_field_that_is_not_json_is_rejected_and_an_empty_one_is_left_out() {
        // ControllerRevision.data is a runtime.RawExtension {bytes raw = 1}.
        let raw = Enc::default()
            .msg(1, meta("r", ""))
            .msg(2, Enc::default().bytes(1, b"{not json"));
        assert_eq!(
            decode(&envelope("apps/v1", "ControllerRevision", raw)),
            Err(Error::InvalidJson {
                message: "ControllerRevision",
                json: "data"
            })
        );
        let raw = Enc::default()
            .msg(1, meta("r", ""))
            .msg(2, Enc::default())
            .varint(3, 2);
        assert_eq!(
            decode(&envelope("apps/v1", "ControllerRevision", raw)),
            Ok(
                json!({"apiVersion": "apps/v1", "kind": "ControllerRevision",
                      "metadata": {"name": "r"}, "revision": 2})
            )
        );
    }

    #[test]
    fn a_timestamp_beyond_year_9999_is_rejected() {
        let raw = Enc::default().msg(
            1,
            Enc::default().msg(8, Enc::default().varint(1, 300_000_000_000)),
        );
        assert!(matches!(
            decode(&envelope("v1", "ConfigMap", raw)),
            Err(Error::InvalidTimestamp {
                json: "creationTimestamp",
                ..
            })
        ));
    }

    #[test]
    fn a_compressed_or_foreign_envelope_is_rejected() {
        let mut body = MAGIC.to_vec();
        let unknown = Enc::default()
            .msg(1, Enc::default().str(1, "v1").str(2, "ConfigMap"))
            .str(3, "gzip");
        body.extend_from_slice(&unknown.0);
        assert_eq!(
            decode(&body),
            Err(Error::UnsupportedEncoding("gzip".into()))
        );

        let mut body = MAGIC.to_vec();
        let unknown = Enc::default()
            .msg(1, Enc::default().str(1, "v1").str(2, "ConfigMap"))
            .str(4, "application/json");
        body.extend_from_slice(&unknown.0);
        assert_eq!(
            decode(&body),
            Err(Error::UnsupportedContentType("application/json".into()))
        );
    }

    static NODE: Message = Message {
        name: "Node",
        fields: &[keep(1, "child", Type::Message(&NODE))],
    };

    static SCALARS: Message = Message {
        name: "Scalars",
        fields: &[
            opt(1, "small", Type::Int32),
            opt(2, "blob", Type::Bytes),
            list(3, "counts", Type::Int64),
            keep(4, "flag", Type::Bool),
            opt(5, "empty", Type::Bytes),
            opt(6, "zero", Type::Int32),
        ],
    };

    #[test]
    fn int32_bytes_and_packed_repeated_varints_decode_by_the_table() {
        let mut packed = Vec::new();
        put_varint(&mut packed, 1);
        put_varint(&mut packed, 300);
        let fields = Enc::default()
            .varint(1, (-5i64) as u64)
            .bytes(2, b"hi!")
            .bytes(3, &packed)
            .varint(3, 7)
            .varint(4, 0)
            .bytes(5, b"")
            .varint(6, 0);
        let mut out = Map::new();
        decode_message(&fields.0, &SCALARS, 0, &mut out).unwrap();
        assert_eq!(
            Value::Object(out),
            json!({"small": -5, "blob": "aGkh", "counts": [1, 300, 7], "flag": false})
        );
    }

    #[test]
    fn nesting_deeper_than_the_cap_is_rejected() {
        let mut nested = Enc::default();
        for _ in 0..(MAX_DEPTH + 2) {
            nested = Enc::default().msg(1, nested);
        }
        let mut out = Map::new();
        assert_eq!(
            decode_message(&nested.0, &NODE, 0, &mut out),
            Err(Error::TooDeep { max: MAX_DEPTH })
        );
        let mut shallow = Enc::default();
        for _ in 0..MAX_DEPTH {
            shallow = Enc::default().msg(1, shallow);
        }
        assert!(decode_message(&shallow.0, &NODE, 0, &mut Map::new()).is_ok());
    }

    #[test]
    fn arbitrary_bytes_after_the_magic_never_panic() {
        // A small deterministic generator: every outcome is fine except a panic or a hang.
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for _ in 0..20_000 {
            let len = (next() % 64) as usize;
            let mut body = MAGIC.to_vec();
            body.extend((0..len).map(|_| next() as u8));
            let _ = decode(&body);
        }
        for (_, fixture, _) in REAL {
            for _ in 0..200 {
                let mut body = fixture.to_vec();
                let at = 4 + (next() as usize) % (body.len() - 4);
                body[at] = next() as u8;
                let _ = decode(&body);
            }
        }
    }

    // Bodies captured from kubectl v1.32 -----------------------------------------------------------
    //
    // Each was captured by pointing kubectl at a plain-HTTP listener on 127.0.0.1 that saved the
    // request body and answered 500; the comment is the command that sent it.

    /// `kubectl create configmap x --from-literal=a=b`
    const CONFIG_MAP_LITERAL: &[u8] = b"k8s\x00\x0a\x0f\x0a\x02v1\x12\x09ConfigMap\x12\x1b\x0a\x11\x0a\x01x\x12\x00\x1a\x00\"\x00*\x002\x008\x00B\x00\x12\x06\x0a\x01a\x12\x01b\x1a\x00\"\x00";

    /// `kubectl create configmap y --from-file=bin.dat --from-literal=k=v (bin.dat = ff fe 00 'bin')`
    const CONFIG_MAP_BINARY_FILE: &[u8] = b"k8s\x00\x0a\x0f\x0a\x02v1\x12\x09ConfigMap\x12.\x0a\x11\x0a\x01y\x12\x00\x1a\x00\"\x00*\x002\x008\x00B\x00\x12\x06\x0a\x01k\x12\x01v\x1a\x11\x0a\x07bin.dat\x12\x06\xff\xfe\x00bin\x1a\x00\"\x00";

    /// `kubectl auth can-i get pods`
    const SSAR_GET_PODS: &[u8] = b"k8s\x00\x0a2\x0a\x17authorization.k8s.io/v1\x12\x17SelfSubjectAccessReview\x12<\x0a\x10\x0a\x00\x12\x00\x1a\x00\"\x00*\x002\x008\x00B\x00\x12\x1e\x0a\x1c\x0a\x07default\x12\x03get\x1a\x00\"\x00*\x04pods2\x00:\x00\x1a\x08\x08\x00\x12\x00\x1a\x00 \x00\x1a\x00\"\x00";

    /// `kubectl auth can-i get /healthz`
    const SSAR_NON_RESOURCE: &[u8] = b"k8s\x00\x0a2\x0a\x17authorization.k8s.io/v1\x12\x17SelfSubjectAccessReview\x12/\x0a\x10\x0a\x00\x12\x00\x1a\x00\"\x00*\x002\x008\x00B\x00\x12\x11\x12\x0f\x0a\x08/healthz\x12\x03get\x1a\x08\x08\x00\x12\x00\x1a\x00 \x00\x1a\x00\"\x00";

    /// `kubectl auth can-i list deployments.apps -n kube-system --subresource=status`
    const SSAR_SUBRESOURCE: &[u8] = b"k8s\x00\x0a2\x0a\x17authorization.k8s.io/v1\x12\x17SelfSubjectAccessReview\x12S\x0a\x10\x0a\x00\x12\x00\x1a\x00\"\x00*\x002\x008\x00B\x00\x125\x0a3\x0a\x0bkube-system\x12\x04list\x1a\x00\"\x00*\x10deployments.apps2\x06status:\x00\x1a\x08\x08\x00\x12\x00\x1a\x00 \x00\x1a\x00\"\x00";

    /// `kubectl create token mysa --duration=1h --audience=aud1 --audience=aud2`
    const TOKEN_AUDIENCES: &[u8] = b"k8s\x00\x0a(\x0a\x18authentication.k8s.io/v1\x12\x0cTokenRequest\x12)\x0a\x10\x0a\x00\x12\x00\x1a\x00\"\x00*\x002\x008\x00B\x00\x12\x0f\x0a\x04aud1\x0a\x04aud2 \x90\x1c\x1a\x04\x0a\x00\x12\x00\x1a\x00\"\x00";

    /// `kubectl create token mysa --bound-object-kind=Pod --bound-object-name=p1 --bound-object-uid=u-1`
    const TOKEN_BOUND_POD: &[u8] = b"k8s\x00\x0a(\x0a\x18authentication.k8s.io/v1\x12\x0cTokenRequest\x12.\x0a\x10\x0a\x00\x12\x00\x1a\x00\"\x00*\x002\x008\x00B\x00\x12\x14\x1a\x12\x0a\x03Pod\x12\x02v1\x1a\x02p1\"\x03u-1\x1a\x04\x0a\x00\x12\x00\x1a\x00\"\x00";

    /// `kubectl create namespace ns1`
    const NAMESPACE: &[u8] = b"k8s\x00\x0a\x0f\x0a\x02v1\x12\x09Namespace\x12\x1b\x0a\x13\x0a\x03ns1\x12\x00\x1a\x00\"\x00*\x002\x008\x00B\x00\x12\x00\x1a\x02\x0a\x00\x1a\x00\"\x00";

    /// `kubectl create secret generic s1 --from-literal=user=admin --type=Opaque`
    const SECRET_LITERAL: &[u8] = b"k8s\x00\x0a\x0c\x0a\x02v1\x12\x06Secret\x12+\x0a\x12\x0a\x02s1\x12\x00\x1a\x00\"\x00*\x002\x008\x00B\x00\x12\x0d\x0a\x04user\x12\x05admin\x1a\x06Opaque\x1a\x00\"\x00";

    /// `kubectl create serviceaccount sa1`
    const SERVICE_ACCOUNT: &[u8] = b"k8s\x00\x0a\x14\x0a\x02v1\x12\x0eServiceAccount\x12\x15\x0a\x13\x0a\x03sa1\x12\x00\x1a\x00\"\x00*\x002\x008\x00B\x00\x1a\x00\"\x00";

    /// `kubectl create clusterrole cr1 --verb=get --non-resource-url=/logs/*`
    const CLUSTER_ROLE_NON_RESOURCE: &[u8] = b"k8s\x00\x0a+\x0a\x1crbac.authorization.k8s.io/v1\x12\x0bClusterRole\x12%\x0a\x13\x0a\x03cr1\x12\x00\x1a\x00\"\x00*\x002\x008\x00B\x00\x12\x0e\x0a\x03get*\x07/logs/*\x1a\x00\"\x00";

    /// `kubectl create rolebinding rb1 --role=r1 --user=alice --serviceaccount=default:sa1 --group=g1`
    const ROLE_BINDING: &[u8] = b"k8s\x00\x0a+\x0a\x1crbac.authorization.k8s.io/v1\x12\x0bRoleBinding\x12\xb4\x01\x0a\x13\x0a\x03rb1\x12\x00\x1a\x00\"\x00*\x002\x008\x00B\x00\x12*\x0a\x04User\x12\x19rbac.authorization.k8s.io\x1a\x05alice\"\x00\x12(\x0a\x05Group\x12\x19rbac.authorization.k8s.io\x1a\x02g1\"\x00\x12 \x0a\x0eServiceAccount\x12\x00\x1a\x03sa1\"\x07default\x1a%\x0a\x19rbac.authorization.k8s.io\x12\x04Role\x1a\x02r1\x1a\x00\"\x00";

    /// `kubectl create clusterrolebinding crb1 --clusterrole=cr1 --user=bob`
    const CLUSTER_ROLE_BINDING: &[u8] = b"k8s\x00\x0a2\x0a\x1crbac.authorization.k8s.io/v1\x12\x12ClusterRoleBinding\x12o\x0a\x14\x0a\x04crb1\x12\x00\x1a\x00\"\x00*\x002\x008\x00B\x00\x12(\x0a\x04User\x12\x19rbac.authorization.k8s.io\x1a\x03bob\"\x00\x1a-\x0a\x19rbac.authorization.k8s.io\x12\x0bClusterRole\x1a\x03cr1\x1a\x00\"\x00";

    /// `kubectl create role r1 --verb=get,list --resource=pods,configmaps --resource-name=p1`
    const ROLE: &[u8] = b"k8s\x00\x0a$\x0a\x1crbac.authorization.k8s.io/v1\x12\x04Role\x129\x0a\x12\x0a\x02r1\x12\x00\x1a\x00\"\x00*\x002\x008\x00B\x00\x12#\x0a\x03get\x0a\x04list\x12\x00\x1a\x04pods\x1a\x0aconfigmaps\"\x02p1\x1a\x00\"\x00";

    /// `kubectl create secret generic s2 --from-file=bin.dat`
    const SECRET_BINARY_FILE: &[u8] = b"k8s\x00\x0a\x0c\x0a\x02v1\x12\x06Secret\x12)\x0a\x12\x0a\x02s2\x12\x00\x1a\x00\"\x00*\x002\x008\x00B\x00\x12\x11\x0a\x07bin.dat\x12\x06\xff\xfe\x00bin\x1a\x00\x1a\x00\"\x00";

    /// `kubectl auth whoami`
    const SELF_SUBJECT_REVIEW: &[u8] = b"k8s\x00\x0a-\x0a\x18authentication.k8s.io/v1\x12\x11SelfSubjectReview\x12\x1a\x0a\x10\x0a\x00\x12\x00\x1a\x00\"\x00*\x002\x008\x00B\x00\x12\x06\x0a\x04\x0a\x00\x12\x00\x1a\x00\"\x00";

    /// A captured body: its name, its bytes and the JSON the decoder must turn it into.
    type Fixture = (&'static str, &'static [u8], fn() -> Value);

    static REAL: &[Fixture] = &[
        ("configmap", CONFIG_MAP_LITERAL, || {
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"},
                   "data": {"a": "b"}})
        }),
        ("configmap from file", CONFIG_MAP_BINARY_FILE, || {
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "y"},
                   "data": {"k": "v"}, "binaryData": {"bin.dat": "//4AYmlu"}})
        }),
        ("can-i get pods", SSAR_GET_PODS, || {
            json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                   "metadata": {},
                   "spec": {"resourceAttributes": {"namespace": "default", "verb": "get",
                                                   "resource": "pods"}},
                   "status": {"allowed": false}})
        }),
        ("can-i get /healthz", SSAR_NON_RESOURCE, || {
            json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                   "metadata": {},
                   "spec": {"nonResourceAttributes": {"path": "/healthz", "verb": "get"}},
                   "status": {"allowed": false}})
        }),
        ("can-i with subresource", SSAR_SUBRESOURCE, || {
            json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                   "metadata": {},
                   "spec": {"resourceAttributes": {"namespace": "kube-system", "verb": "list",
                                                   "resource": "deployments.apps",
                                                   "subresource": "status"}},
                   "status": {"allowed": false}})
        }),
        ("token with audiences", TOKEN_AUDIENCES, || {
            json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                   "metadata": {},
                   "spec": {"audiences": ["aud1", "aud2"], "expirationSeconds": 3600},
                   "status": {"token": ""}})
        }),
        ("token bound to a pod", TOKEN_BOUND_POD, || {
            json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                   "metadata": {},
                   "spec": {"boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": "p1",
                                               "uid": "u-1"}},
                   "status": {"token": ""}})
        }),
        ("namespace", NAMESPACE, || {
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns1"},
                   "spec": {}, "status": {}})
        }),
        ("secret from literal", SECRET_LITERAL, || {
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s1"},
                   "data": {"user": "YWRtaW4="}, "type": "Opaque"})
        }),
        (
            "serviceaccount",
            SERVICE_ACCOUNT,
            || json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "sa1"}}),
        ),
        ("clusterrole", CLUSTER_ROLE_NON_RESOURCE, || {
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                   "metadata": {"name": "cr1"},
                   "rules": [{"verbs": ["get"], "nonResourceURLs": ["/logs/*"]}]})
        }),
        ("rolebinding", ROLE_BINDING, || {
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                   "metadata": {"name": "rb1"},
                   "subjects": [
                       {"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "alice"},
                       {"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": "g1"},
                       {"kind": "ServiceAccount", "name": "sa1", "namespace": "default"}],
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                               "name": "r1"}})
        }),
        ("clusterrolebinding", CLUSTER_ROLE_BINDING, || {
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                   "metadata": {"name": "crb1"},
                   "subjects": [
                       {"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "bob"}],
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                               "name": "cr1"}})
        }),
        ("role", ROLE, || {
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                   "metadata": {"name": "r1"},
                   "rules": [{"verbs": ["get", "list"], "apiGroups": [""],
                              "resources": ["pods", "configmaps"], "resourceNames": ["p1"]}]})
        }),
        ("secret from file", SECRET_BINARY_FILE, || {
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s2"},
                   "data": {"bin.dat": "//4AYmlu"}})
        }),
        ("whoami", SELF_SUBJECT_REVIEW, || {
            json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview",
                   "metadata": {}, "status": {"userInfo": {}}})
        }),
    ];

    #[test]
    fn every_body_captured_from_kubectl_decodes_to_the_json_kubectl_would_have_sent() {
        for (name, body, expected) in REAL {
            assert_eq!(decode(body).as_ref(), Ok(&expected()), "{name}");
        }
    }

    // Differential fixtures written by protogen ---------------------------------------------------
    //
    // `cd crates/sim-apiserver/protogen && go run . fixtures ../tests/protobuf` writes, for each of
    // a handful of rich objects built from the Go types, NAME.pb (the body client-go's protobuf
    // serializer sends) and NAME.json (what encoding/json writes for the same object).

    /// Drops the object members whose value is `null`: encoding/json writes `null` for a nil
    /// slice, map or pointer without `omitempty`, where protobuf has nothing on the wire and the
    /// decoder leaves the member out; both read the same.
    fn without_nulls(value: Value) -> Value {
        match value {
            Value::Object(map) => Value::Object(
                map.into_iter()
                    .filter(|(_, v)| !v.is_null())
                    .map(|(k, v)| (k, without_nulls(v)))
                    .collect(),
            ),
            Value::Array(items) => Value::Array(items.into_iter().map(without_nulls).collect()),
            other => other,
        }
    }

    #[test]
    fn every_body_written_by_client_go_decodes_to_the_json_encoding_json_writes() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/protobuf");
        let mut names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|entry| entry.unwrap().path())
            .filter(|path| path.extension().is_some_and(|ext| ext == "pb"))
            .collect();
        names.sort();
        assert!(
            names.len() >= 10,
            "fixtures in {}: {names:?}",
            dir.display()
        );
        for pb in names {
            let body = std::fs::read(&pb).unwrap();
            let text = std::fs::read(pb.with_extension("json")).unwrap();
            let expected: Value = serde_json::from_slice(&text).unwrap();
            let decoded = decode(&body).unwrap_or_else(|e| panic!("{}: {e}", pb.display()));
            assert_eq!(
                without_nulls(decoded),
                without_nulls(expected),
                "{}",
                pb.display()
            );
        }
    }
}

//! Writes the JSON bodies of the server's answers byte for byte as kube-apiserver does.
//!
//! kube-apiserver writes a built-in object with Go's encoding/json from its Go struct: `kind`
//! and `apiVersion` first (TypeMeta is embedded first), then every field in declaration order,
//! embedded structs (`json:",inline"`) in place, nested structs the same way. Maps (labels,
//! data, annotations) and everything unstructured — custom resources and their lists, raw
//! JSON such as `fieldsV1` — are written with their keys sorted, as Go sorts map keys.
//! [`serde_json::Value`] keeps no order of its own (its maps are sorted), so an answer is
//! written by walking its value with the message of its kind from the protobuf schema table
//! ([`crate::protobuf`]), which lists each Go struct's fields in declaration order. Keys the
//! message does not know come after its known fields, sorted. A field encoding/json writes even
//! when unset (a non-pointer struct, or a value without `omitempty`) is written with its zero
//! value when the object lacks it: `{}` (with the struct's own such fields), `null` for a
//! slice, a map, a time or raw JSON, `""`, `0`, `false`.
//!
//! Strings are escaped as encoding/json escapes them: `<`, `>` and `&` as `\u003c`, `\u003e`
//! and `\u0026`, U+2028 and U+2029 as `\u2028` and `\u2029`, control characters as `\n`,
//! `\r`, `\t`, `\b`, `\f` or `\u00XX`; floats as it writes a float64.

use serde_json::{Map, Value};

use crate::protobuf::{Message, Presence, Type, message_of};

/// The JSON body of an answer: an object of a built-in kind (its kind and apiVersion say which)
/// in its Go struct's order, anything else with sorted keys.
pub fn to_vec(value: &Value) -> Vec<u8> {
    let mut out = Vec::with_capacity(512);
    write_top(&mut out, value);
    out
}

/// A whole answer's body as kube-apiserver's encoder writes it: [`to_vec`] and a newline.
pub fn document(value: &Value) -> Vec<u8> {
    let mut out = to_vec(value);
    out.push(b'\n');
    out
}

/// The body of an error answered to a request whose every accepted media type asks for another
/// form (`as=PartialObjectMetadata`, `as=Table`): kube-apiserver cannot negotiate a `Status`
/// then and writes it indented by two spaces, without a final newline (as `json.MarshalIndent`),
/// else as [`document`].
pub fn error_document(status: &Value, accept: Option<&str>) -> Vec<u8> {
    let only_other_forms = accept.is_some_and(|accept| {
        accept.split(',').all(|range| {
            range
                .split(';')
                .skip(1)
                .any(|param| param.trim().starts_with("as="))
        })
    });
    if only_other_forms {
        indent(&to_vec(status))
    } else {
        document(status)
    }
}

/// The fields of `/version`'s document (apimachinery's `version.Info`), in declaration order.
const VERSION_INFO: [&str; 13] = [
    "major",
    "minor",
    "emulationMajor",
    "emulationMinor",
    "minCompatibilityMajor",
    "minCompatibilityMinor",
    "gitVersion",
    "gitCommit",
    "gitTreeState",
    "buildDate",
    "goVersion",
    "compiler",
    "platform",
];

/// The body of `/version`, which kube-apiserver always writes indented, without a final newline:
/// `info`'s fields in `version.Info`'s order, then any other, sorted.
pub fn version_document(info: &Value) -> Vec<u8> {
    let Value::Object(fields) = info else {
        return indent(&to_vec(info));
    };
    let mut out = vec![b'{'];
    let mut first = true;
    let known = VERSION_INFO
        .iter()
        .filter_map(|key| Some((*key, fields.get(*key)?)));
    let others = fields
        .iter()
        .filter(|(key, _)| !VERSION_INFO.contains(&key.as_str()))
        .map(|(key, value)| (key.as_str(), value));
    for (key, value) in known.chain(others) {
        write_key(&mut out, &mut first, key);
        write_plain(&mut out, value);
    }
    out.push(b'}');
    indent(&out)
}

/// Compact JSON text indented as `json.Indent` with two spaces does: one member or item a
/// line, `": "` after keys, empty objects and arrays kept as `{}` and `[]`.
fn indent(compact: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(compact.len() * 2);
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    let newline = |out: &mut Vec<u8>, depth: usize| {
        out.push(b'\n');
        out.extend(std::iter::repeat_n(b' ', depth * 2));
    };
    let mut i = 0;
    while i < compact.len() {
        let byte = compact[i];
        if in_string {
            out.push(byte);
            match (escaped, byte) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            i += 1;
            continue;
        }
        match byte {
            b'"' => {
                in_string = true;
                out.push(byte);
            }
            b'{' | b'[' => {
                let close = if byte == b'{' { b'}' } else { b']' };
                if compact.get(i + 1) == Some(&close) {
                    out.extend_from_slice(&[byte, close]);
                    i += 2;
                    continue;
                }
                out.push(byte);
                depth += 1;
                newline(&mut out, depth);
            }
            b'}' | b']' => {
                depth = depth.saturating_sub(1);
                newline(&mut out, depth);
                out.push(byte);
            }
            b',' => {
                out.push(byte);
                newline(&mut out, depth);
            }
            b':' => out.extend_from_slice(b": "),
            _ => out.push(byte),
        }
        i += 1;
    }
    out
}

/// One line of a watch: `{"type":…,"object":…}` and a newline, the object written as
/// [`to_vec`] writes it.
pub fn watch_line(event_type: &str, object: &Value) -> Vec<u8> {
    let mut out = Vec::with_capacity(512);
    out.extend_from_slice(b"{\"type\":");
    write_str(&mut out, event_type);
    out.extend_from_slice(b",\"object\":");
    write_top(&mut out, object);
    out.extend_from_slice(b"}\n");
    out
}

/// A whole answer or a watch event's object: ordered by the message of its kind if it is a
/// built-in one.
fn write_top(out: &mut Vec<u8>, value: &Value) {
    match value {
        Value::Object(map) => {
            let message = match (map.get("apiVersion"), map.get("kind")) {
                (Some(Value::String(api_version)), Some(Value::String(kind))) => {
                    message_of(api_version, kind)
                }
                // Core discovery's APIVersions carries a kind but no apiVersion.
                (None, Some(Value::String(kind))) => message_of("v1", kind),
                _ => None,
            };
            match message {
                Some(message) => write_message(out, map, message),
                None => write_plain(out, value),
            }
        }
        other => write_plain(out, other),
    }
}

/// An object of `message`: TypeMeta's kind and apiVersion, the message's fields in order, then
/// keys it does not know, sorted.
fn write_message(out: &mut Vec<u8>, map: &Map<String, Value>, message: &'static Message) {
    out.push(b'{');
    let mut first = true;
    let mut written = 0;
    for type_meta in ["kind", "apiVersion"] {
        if let Some(value) = map.get(type_meta)
            && !knows(message, type_meta)
        {
            write_key(out, &mut first, type_meta);
            write_plain(out, value);
            written += 1;
        }
    }
    write_fields(out, map, message, &mut first, &mut written);
    if written < map.len() {
        for (key, value) in map {
            if key != "kind" && key != "apiVersion" && !knows(message, key) {
                write_key(out, &mut first, key);
                write_plain(out, value);
            }
        }
    }
    out.push(b'}');
}

/// The fields of `message` present in `map`, in declaration order, inline messages' in place.
fn write_fields(
    out: &mut Vec<u8>,
    map: &Map<String, Value>,
    message: &'static Message,
    first: &mut bool,
    written: &mut usize,
) {
    for field in message.fields {
        if field.presence == Presence::Inline {
            if let Type::Message(inner) = field.ty {
                write_fields(out, map, inner, first, written);
            }
            continue;
        }
        let Some(value) = map.get(field.json) else {
            if field.always {
                write_key(out, first, field.json);
                write_zero(out, field);
            }
            continue;
        };
        write_key(out, first, field.json);
        *written += 1;
        match (field.presence, value) {
            (Presence::List, Value::Array(items)) => {
                out.push(b'[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    write_typed(out, item, field.ty);
                }
                out.push(b']');
            }
            (Presence::Map, Value::Object(entries)) => {
                out.push(b'{');
                let mut first_entry = true;
                for (key, entry) in entries {
                    write_key(out, &mut first_entry, key);
                    write_typed(out, entry, field.ty);
                }
                out.push(b'}');
            }
            _ => write_typed(out, value, field.ty),
        }
    }
}

/// The zero value of an unset field as encoding/json writes it: `null` for a slice, a map, a
/// time or raw JSON, the written fields of an empty struct, `""`, `0`, `false`, and `"0"` for a
/// quantity.
fn write_zero(out: &mut Vec<u8>, field: &crate::protobuf::Field) {
    if matches!(field.presence, Presence::List | Presence::Map) {
        out.extend_from_slice(b"null");
        return;
    }
    match field.ty {
        Type::Str => out.extend_from_slice(b"\"\""),
        Type::Int64 | Type::Int32 | Type::Double | Type::IntOrString => out.push(b'0'),
        Type::Bool => out.extend_from_slice(b"false"),
        Type::Quantity => out.extend_from_slice(b"\"0\""),
        Type::Message(message) => write_message(out, &Map::new(), message),
        Type::Bytes
        | Type::Time
        | Type::MicroTime
        | Type::RawJson
        | Type::StringList
        | Type::SchemaOrArray(_)
        | Type::SchemaOrBool(_)
        | Type::SchemaOrStringArray(_) => out.extend_from_slice(b"null"),
    }
}

/// Whether `message` (or a message inlined in it) has a field named `json`.
fn knows(message: &'static Message, json: &str) -> bool {
    message.fields.iter().any(|field| match field.presence {
        Presence::Inline => matches!(field.ty, Type::Message(inner) if knows(inner, json)),
        _ => field.json == json,
    })
}

/// A value of type `ty`: a message's object in its order, anything else as it is.
fn write_typed(out: &mut Vec<u8>, value: &Value, ty: Type) {
    match (ty, value) {
        (
            Type::Message(message)
            | Type::SchemaOrArray(message)
            | Type::SchemaOrBool(message)
            | Type::SchemaOrStringArray(message),
            Value::Object(map),
        ) => write_message(out, map, message),
        (Type::SchemaOrArray(message), Value::Array(items)) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_typed(out, item, Type::Message(message));
            }
            out.push(b']');
        }
        _ => write_plain(out, value),
    }
}

/// A value without a schema: objects with their keys sorted, as Go writes a map.
fn write_plain(out: &mut Vec<u8>, value: &Value) {
    match value {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        Value::Number(number) => match number.as_f64().filter(|_| number.is_f64()) {
            Some(float) => write_float(out, float),
            None => out.extend_from_slice(number.to_string().as_bytes()),
        },
        Value::String(text) => write_str(out, text),
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_plain(out, item);
            }
            out.push(b']');
        }
        Value::Object(map) => {
            out.push(b'{');
            let mut first = true;
            for (key, value) in map {
                write_key(out, &mut first, key);
                write_plain(out, value);
            }
            out.push(b'}');
        }
    }
}

/// A float64 as encoding/json writes it: the shortest decimal that reads back the same, without
/// an exponent (and without a fraction when it has none) unless it is below 1e-6 or at least
/// 1e21, then with one (`1e+21`, `1e-7`).
fn write_float(out: &mut Vec<u8>, float: f64) {
    let magnitude = float.abs();
    let text = if magnitude != 0.0 && !(1e-6..1e21).contains(&magnitude) {
        let text = format!("{float:e}");
        match text.split_once('e') {
            Some((mantissa, exponent)) if !exponent.starts_with('-') => {
                format!("{mantissa}e+{exponent}")
            }
            _ => text,
        }
    } else {
        format!("{float}")
    };
    out.extend_from_slice(text.as_bytes());
}

/// `"key":`, after a comma unless it is the object's first.
fn write_key(out: &mut Vec<u8>, first: &mut bool, key: &str) {
    if !std::mem::take(first) {
        out.push(b',');
    }
    write_str(out, key);
    out.push(b':');
}

/// A JSON string, escaped as encoding/json escapes it.
fn write_str(out: &mut Vec<u8>, text: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push(b'"');
    let bytes = text.as_bytes();
    let mut start = 0;
    let mut i = 0;
    while i < bytes.len() {
        let byte = bytes[i];
        let escape: Option<&[u8]> = match byte {
            b'"' => Some(b"\\\""),
            b'\\' => Some(b"\\\\"),
            b'\n' => Some(b"\\n"),
            b'\r' => Some(b"\\r"),
            b'\t' => Some(b"\\t"),
            0x08 => Some(b"\\b"),
            0x0c => Some(b"\\f"),
            0x00..=0x1f | b'<' | b'>' | b'&' => Some(&[]),
            // U+2028 and U+2029 are E2 80 A8 and E2 80 A9 in UTF-8.
            0xe2 if bytes.get(i + 1) == Some(&0x80)
                && matches!(bytes.get(i + 2), Some(0xa8 | 0xa9)) =>
            {
                Some(&[])
            }
            _ => None,
        };
        let Some(escape) = escape else {
            i += 1;
            continue;
        };
        out.extend_from_slice(&bytes[start..i]);
        if escape.is_empty() {
            let unit: u16 = if byte == 0xe2 {
                if bytes[i + 2] == 0xa8 { 0x2028 } else { 0x2029 }
            } else {
                u16::from(byte)
            };
            out.extend_from_slice(b"\\u");
            for shift in [12, 8, 4, 0] {
                out.push(HEX[usize::from((unit >> shift) & 0xf)]);
            }
            i += if byte == 0xe2 { 3 } else { 1 };
        } else {
            out.extend_from_slice(escape);
            i += 1;
        }
        start = i;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn text(value: &Value) -> String {
        String::from_utf8(to_vec(value)).unwrap()
    }

    #[test]
    fn an_owner_reference_is_written_in_its_go_declaration_order() {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"z": "1", "a": "2"},
            "metadata": {"name": "c", "labels": {"b": "1", "a": "2"}, "ownerReferences": [{
                "uid": "u", "name": "o", "kind": "Deployment", "controller": true,
                "blockOwnerDeletion": true, "apiVersion": "apps/v1"}]}});
        assert_eq!(
            text(&cm),
            r#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"c","labels":{"a":"2","b":"1"},"ownerReferences":[{"apiVersion":"apps/v1","kind":"Deployment","name":"o","uid":"u","controller":true,"blockOwnerDeletion":true}]},"data":{"a":"2","z":"1"}}"#
        );
    }

    #[test]
    fn a_typed_list_has_kind_api_version_metadata_items_and_its_items_their_order() {
        let list = json!({"items": [{"spec": {"holderIdentity": "h"}, "metadata": {"name": "l"}}],
            "metadata": {"resourceVersion": "5"}, "kind": "LeaseList",
            "apiVersion": "coordination.k8s.io/v1"});
        assert_eq!(
            text(&list),
            r#"{"kind":"LeaseList","apiVersion":"coordination.k8s.io/v1","metadata":{"resourceVersion":"5"},"items":[{"metadata":{"name":"l"},"spec":{"holderIdentity":"h"}}]}"#
        );
    }

    #[test]
    fn inline_structs_are_written_in_place_unset_structs_and_lists_as_go_writes_them_and_unknown_keys_last_sorted()
     {
        let pod = json!({"kind": "Pod", "apiVersion": "v1", "zz": 1, "aa": 2,
            "spec": {"volumes": [{"configMap": {"name": "c"}, "name": "v"}]}});
        assert_eq!(
            text(&pod),
            r#"{"kind":"Pod","apiVersion":"v1","metadata":{},"spec":{"volumes":[{"name":"v","configMap":{"name":"c"}}],"containers":null},"status":{},"aa":2,"zz":1}"#
        );
    }

    #[test]
    fn a_custom_resource_and_unknown_documents_are_written_with_sorted_keys() {
        let widget = json!({"kind": "Widget", "apiVersion": "example.com/v1", "spec": {"y": 1, "b": 2},
            "metadata": {"uid": "u", "name": "w"}});
        assert_eq!(
            text(&widget),
            r#"{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w","uid":"u"},"spec":{"b":2,"y":1}}"#
        );
    }

    #[test]
    fn a_status_and_a_watch_event_follow_their_go_structs() {
        let status = json!({"code": 404, "details": {"kind": "configmaps", "name": "x"},
            "reason": "NotFound", "message": "m", "status": "Failure", "metadata": {},
            "apiVersion": "v1", "kind": "Status"});
        let expected = r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"m","reason":"NotFound","details":{"name":"x","kind":"configmaps"},"code":404}"#;
        assert_eq!(text(&status), expected);
        assert_eq!(
            String::from_utf8(watch_line("ERROR", &status)).unwrap(),
            format!("{{\"type\":\"ERROR\",\"object\":{expected}}}\n")
        );
    }

    #[test]
    fn core_discovery_without_an_api_version_is_ordered_by_its_kind() {
        let versions = json!({"serverAddressByClientCIDRs": [{"serverAddress": "a", "clientCIDR": "0.0.0.0/0"}],
            "versions": ["v1"], "kind": "APIVersions"});
        assert_eq!(
            text(&versions),
            r#"{"kind":"APIVersions","versions":["v1"],"serverAddressByClientCIDRs":[{"clientCIDR":"0.0.0.0/0","serverAddress":"a"}]}"#
        );
    }

    #[test]
    fn an_error_to_a_request_for_metadata_only_is_indented_without_a_final_newline() {
        let status = json!({"kind": "Status", "apiVersion": "v1", "metadata": {},
            "status": "Failure", "message": "a \"b\": {c}, [d]", "code": 404,
            "details": {"name": "x", "kind": "configmaps", "causes": []}});
        let partial = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";
        let expected = "{\n  \"kind\": \"Status\",\n  \"apiVersion\": \"v1\",\n  \"metadata\": {},\n  \"status\": \"Failure\",\n  \"message\": \"a \\\"b\\\": {c}, [d]\",\n  \"details\": {\n    \"name\": \"x\",\n    \"kind\": \"configmaps\",\n    \"causes\": []\n  },\n  \"code\": 404\n}";
        assert_eq!(
            String::from_utf8(error_document(&status, Some(partial))).unwrap(),
            expected
        );
        let with_fallback = format!("{partial},application/json");
        let compact = error_document(&status, Some(&with_fallback));
        assert_eq!(compact.last(), Some(&b'\n'));
        assert!(!compact[..compact.len() - 1].contains(&b'\n'));
        assert_eq!(error_document(&status, None), compact);
    }

    #[test]
    fn floats_are_written_as_encoding_json_writes_a_float64() {
        let floats: Value =
            serde_json::from_str("[5.0, 1.5, 1e16, 1e21, 1.25e22, 1e-6, 1e-7, -2.5e-9, 0.0, 7]")
                .unwrap();
        assert_eq!(
            text(&floats),
            "[5,1.5,10000000000000000,1e+21,1.25e+22,0.000001,1e-7,-2.5e-9,0,7]"
        );
    }

    #[test]
    fn the_version_document_is_indented_in_version_info_order() {
        let info = json!({"platform": "linux/amd64", "gitVersion": "v1.34.0", "minor": "34",
            "major": "1", "extra": "x"});
        assert_eq!(
            String::from_utf8(version_document(&info)).unwrap(),
            "{\n  \"major\": \"1\",\n  \"minor\": \"34\",\n  \"gitVersion\": \"v1.34.0\",\n  \"platform\": \"linux/amd64\",\n  \"extra\": \"x\"\n}"
        );
    }

    #[test]
    fn strings_are_escaped_as_encoding_json_escapes_them() {
        let value = json!("<a & b>\u{2028}\u{2029}\"\\\n\r\t\u{8}\u{c}\u{1}\u{7f}é");
        assert_eq!(
            text(&value),
            r#""\u003ca \u0026 b\u003e\u2028\u2029\"\\\n\r\t\b\f\u0001"#.to_string() + "\u{7f}é\""
        );
    }

    #[test]
    fn every_fixture_is_written_byte_for_byte_as_encoding_json_writes_it() {
        // `protogen fixtures` writes each object's protobuf body and encoding/json's indented
        // JSON of it: decoded, written and indented as json.MarshalIndent does, the same bytes.
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/protobuf");
        let mut checked = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_none_or(|e| e != "pb") {
                continue;
            }
            let decoded = crate::protobuf::decode(&std::fs::read(&path).unwrap()).unwrap();
            let go_text = std::fs::read_to_string(path.with_extension("json")).unwrap();
            let ours = String::from_utf8(indent(&to_vec(&decoded))).unwrap() + "\n";
            assert_eq!(ours, go_text, "{}", path.display());
            checked += 1;
        }
        assert!(checked >= 10, "only {checked} fixtures");
    }

    #[test]
    fn a_thousand_item_list_is_written_whole_and_its_cost_printed() {
        let items: Vec<Value> = (0..1000)
            .map(|i| {
                json!({"metadata": {"name": format!("cm-{i}"), "namespace": "default",
                    "uid": "3c1b2a90-0000-4000-8000-000000000000", "resourceVersion": "12345",
                    "creationTimestamp": "2026-01-01T00:00:00Z", "labels": {"app": "x", "tier": "y"},
                    "managedFields": [{"manager": "m", "operation": "Update", "apiVersion": "v1",
                        "time": "2026-01-01T00:00:00Z", "fieldsType": "FieldsV1",
                        "fieldsV1": {"f:data": {".": {}, "f:a": {}}}}]},
                    "data": {"a": "some value", "b": "another value"}})
            })
            .collect();
        let list = json!({"kind": "ConfigMapList", "apiVersion": "v1",
            "metadata": {"resourceVersion": "1"}, "items": items});
        let rounds = 20;
        let started = std::time::Instant::now();
        for _ in 0..rounds {
            std::hint::black_box(serde_json::to_vec(&list).unwrap());
        }
        let sorted = started.elapsed() / rounds;
        let started = std::time::Instant::now();
        for _ in 0..rounds {
            std::hint::black_box(to_vec(&list));
        }
        let ordered = started.elapsed() / rounds;
        println!(
            "1,000 ConfigMaps ({} bytes): serde_json {sorted:?}, in Go's order {ordered:?}",
            to_vec(&list).len()
        );
        assert_eq!(
            serde_json::from_slice::<Value>(&to_vec(&list)).unwrap(),
            list
        );
    }
}

//! What ConfigMaps and Secrets hold, validated as `ValidateConfigMap` and `ValidateSecret` of
//! kube-apiserver 1.34 do (`pkg/apis/core/validation/validation.go`): data keys
//! (`IsConfigMapKey`), a key in both `data` and `binaryData`, the total size, and the keys each
//! Secret type requires. Object metadata and immutability are checked by
//! [`super::objects::validate`]; [`validate`] adds these causes after them.
//!
//! A new Pod may not have ephemeral containers (`ValidatePodCreate`: they are added through
//! `pods/ephemeralcontainers` only, see [`super::ephemeral`]).
//!
//! Objects arrive in stored form, after defaulting: a Secret's `stringData` is already merged
//! into `data`, so its keys are reported under `data[…]`, as upstream reports them.
//!
//! # Caveats
//! - Go iterates maps in random order, so the real server lists several bad keys in any order;
//!   here they come sorted, `data` before `binaryData` as upstream.

use base64::Engine as _;
use serde_json::{Map, Value};

use super::names::{self, Cause, go_quote};
use super::registry::ResourceType;

/// The most bytes a ConfigMap's or a Secret's data may total (`core.MaxSecretSize`).
pub const MAX_SECRET_SIZE: usize = 1024 * 1024;

/// The causes of a ConfigMap or Secret beyond its metadata; none for other types.
pub fn validate(rt: &ResourceType, obj: &Value) -> Vec<Cause> {
    match (rt.group.as_str(), rt.resource.as_str()) {
        ("", "configmaps") => validate_config_map(obj),
        ("", "secrets") => validate_secret(obj),
        ("", "pods") if is_new(obj) => super::ephemeral::validate_create(obj),
        _ => Vec::new(),
    }
}

/// Whether `obj` is being created: an object has no `resourceVersion` until it is stored,
/// and every update carries the one it was written against.
fn is_new(obj: &Value) -> bool {
    obj["metadata"]["resourceVersion"]
        .as_str()
        .is_none_or(str::is_empty)
}

fn entries<'v>(obj: &'v Value, field: &str) -> Option<&'v Map<String, Value>> {
    obj.get(field).and_then(Value::as_object)
}

/// The bytes of a base64 value as stored (the string itself should it not decode).
fn decoded(value: &Value) -> Vec<u8> {
    let text = value.as_str().unwrap_or_default();
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .unwrap_or_else(|_| text.as_bytes().to_vec())
}

fn bad_keys(field: &str, key: &str, causes: &mut Vec<Cause>) {
    for msg in names::config_map_key(key) {
        causes.push(Cause::invalid(
            &format!("{field}[{key}]"),
            Value::from(key),
            msg,
        ));
    }
}

/// `ValidateConfigMap` without the metadata.
fn validate_config_map(obj: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let data = entries(obj, "data");
    let binary = entries(obj, "binaryData");
    let mut total = 0usize;
    for (key, value) in data.into_iter().flatten() {
        bad_keys("data", key, &mut causes);
        if binary.is_some_and(|b| b.contains_key(key)) {
            causes.push(Cause::invalid(
                &format!("data[{key}]"),
                Value::from(key.as_str()),
                "duplicate of key present in binaryData",
            ));
        }
        total = total.saturating_add(value.as_str().map_or(0, str::len));
    }
    for (key, value) in binary.into_iter().flatten() {
        bad_keys("binaryData", key, &mut causes);
        total = total.saturating_add(decoded(value).len());
    }
    if total > MAX_SECRET_SIZE {
        // field.NewPath("") prints as "[]": the error is about the whole object.
        causes.push(Cause::too_long("[]", Some(MAX_SECRET_SIZE)));
    }
    causes
}

/// `ValidateSecret` without the metadata.
fn validate_secret(obj: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let data = entries(obj, "data");
    let mut total = 0usize;
    for (key, value) in data.into_iter().flatten() {
        bad_keys("data", key, &mut causes);
        total = total.saturating_add(decoded(value).len());
    }
    if total > MAX_SECRET_SIZE {
        causes.push(Cause::too_long("data", Some(MAX_SECRET_SIZE)));
    }
    let has = |key: &str| data.is_some_and(|d| d.contains_key(key));
    let required = |key: &str| Cause::required(&format!("data[{key}]"), "");
    match obj.get("type").and_then(Value::as_str).unwrap_or_default() {
        "kubernetes.io/service-account-token" => {
            let account = obj["metadata"]["annotations"]["kubernetes.io/service-account.name"]
                .as_str()
                .unwrap_or_default();
            if account.is_empty() {
                causes.push(Cause::required(
                    "metadata.annotations[kubernetes.io/service-account.name]",
                    "",
                ));
            }
        }
        kind @ ("kubernetes.io/dockercfg" | "kubernetes.io/dockerconfigjson") => {
            let key = if kind == "kubernetes.io/dockercfg" {
                ".dockercfg"
            } else {
                ".dockerconfigjson"
            };
            match data.and_then(|d| d.get(key)) {
                None => causes.push(required(key)),
                Some(value) => {
                    if let Some(error) = json_object_error(&decoded(value)) {
                        causes.push(Cause::invalid(
                            &format!("data[{key}]"),
                            Value::from("<secret contents redacted>"),
                            error,
                        ));
                    }
                }
            }
        }
        "kubernetes.io/basic-auth" if !has("username") && !has("password") => {
            causes.push(required("username"));
            causes.push(required("password"));
        }
        "kubernetes.io/ssh-auth" => {
            let key = data
                .and_then(|d| d.get("ssh-privatekey"))
                .map(decoded)
                .unwrap_or_default();
            if key.is_empty() {
                causes.push(required("ssh-privatekey"));
            }
        }
        "kubernetes.io/tls" => {
            for key in ["tls.crt", "tls.key"] {
                if !has(key) {
                    causes.push(required(key));
                }
            }
        }
        _ => {}
    }
    causes
}

/// The error of `json.Unmarshal(bytes, &map[string]interface{}{})`, worded as Go words it:
/// a syntax error of its scanner, or a value that is not an object (`null` is fine).
fn json_object_error(bytes: &[u8]) -> Option<String> {
    let mut scanner = Scanner { bytes, at: 0 };
    if let Err(e) = scanner.top() {
        return Some(e);
    }
    let first = bytes
        .iter()
        .copied()
        .find(|b| !matches!(b, b' ' | b'\t' | b'\n' | b'\r'));
    let found = match first {
        Some(b'{') | Some(b'n') => return None,
        Some(b'[') => "array",
        Some(b'"') => "string",
        Some(b't' | b'f') => "bool",
        _ => "number",
    };
    Some(format!(
        "json: cannot unmarshal {found} into Go value of type map[string]interface {{}}"
    ))
}

/// A syntax check with the error messages of Go's `encoding/json` scanner.
struct Scanner<'b> {
    bytes: &'b [u8],
    at: usize,
}

const END: &str = "unexpected end of JSON input";

impl Scanner<'_> {
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    fn skip_space(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.at += 1;
        }
    }

    /// The next byte, consumed; the end of input is an error.
    fn next(&mut self) -> Result<u8, String> {
        let c = self.peek().ok_or_else(|| END.to_string())?;
        self.at += 1;
        Ok(c)
    }

    fn top(&mut self) -> Result<(), String> {
        self.value()?;
        self.skip_space();
        match self.peek() {
            None => Ok(()),
            Some(c) => Err(invalid_character(c, "after top-level value")),
        }
    }

    fn value(&mut self) -> Result<(), String> {
        self.skip_space();
        match self.next()? {
            b'{' => self.object(),
            b'[' => self.array(),
            b'"' => self.string(),
            b'-' => self.number(true),
            b'0'..=b'9' => {
                self.at -= 1;
                self.number(false)
            }
            b't' => self.literal("true"),
            b'f' => self.literal("false"),
            b'n' => self.literal("null"),
            c => Err(invalid_character(c, "looking for beginning of value")),
        }
    }

    fn object(&mut self) -> Result<(), String> {
        self.skip_space();
        if self.peek() == Some(b'}') {
            self.at += 1;
            return Ok(());
        }
        loop {
            match self.next()? {
                b'"' => self.string()?,
                c => {
                    return Err(invalid_character(
                        c,
                        "looking for beginning of object key string",
                    ));
                }
            }
            self.skip_space();
            match self.next()? {
                b':' => {}
                c => return Err(invalid_character(c, "after object key")),
            }
            self.value()?;
            self.skip_space();
            match self.next()? {
                b',' => self.skip_space(),
                b'}' => return Ok(()),
                c => return Err(invalid_character(c, "after object key:value pair")),
            }
        }
    }

    fn array(&mut self) -> Result<(), String> {
        self.skip_space();
        if self.peek() == Some(b']') {
            self.at += 1;
            return Ok(());
        }
        loop {
            self.value()?;
            self.skip_space();
            match self.next()? {
                b',' => {}
                b']' => return Ok(()),
                c => return Err(invalid_character(c, "after array element")),
            }
        }
    }

    fn string(&mut self) -> Result<(), String> {
        loop {
            match self.next()? {
                b'"' => return Ok(()),
                b'\\' => match self.next()? {
                    b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => {}
                    b'u' => {
                        for _ in 0..4 {
                            let c = self.next()?;
                            if !c.is_ascii_hexdigit() {
                                return Err(invalid_character(
                                    c,
                                    "in \\u hexadecimal character escape",
                                ));
                            }
                        }
                    }
                    c => return Err(invalid_character(c, "in string escape code")),
                },
                c if c < 0x20 => return Err(invalid_character(c, "in string literal")),
                _ => {}
            }
        }
    }

    fn digits(&mut self) {
        while matches!(self.peek(), Some(b'0'..=b'9')) {
            self.at += 1;
        }
    }

    fn number(&mut self, negative: bool) -> Result<(), String> {
        match self.next()? {
            b'0' => {}
            b'1'..=b'9' => self.digits(),
            c if negative => return Err(invalid_character(c, "in numeric literal")),
            c => return Err(invalid_character(c, "looking for beginning of value")),
        }
        if self.peek() == Some(b'.') {
            self.at += 1;
            match self.next()? {
                b'0'..=b'9' => self.digits(),
                c => {
                    return Err(invalid_character(
                        c,
                        "after decimal point in numeric literal",
                    ));
                }
            }
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.at += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.at += 1;
            }
            match self.next()? {
                b'0'..=b'9' => self.digits(),
                c => return Err(invalid_character(c, "in exponent of numeric literal")),
            }
        }
        Ok(())
    }

    fn literal(&mut self, word: &str) -> Result<(), String> {
        for expected in word.bytes().skip(1) {
            let c = self.next()?;
            if c != expected {
                return Err(invalid_character(
                    c,
                    &format!("in literal {word} (expecting {})", quote_char(expected)),
                ));
            }
        }
        Ok(())
    }
}

/// `quoteChar`: a byte as the scanner quotes it in its messages.
fn quote_char(c: u8) -> String {
    match c {
        b'\'' => "'\\''".to_string(),
        b'"' => "'\"'".to_string(),
        // string(c) of a byte is the rune U+00XX.
        c => {
            let quoted = go_quote(&char::from(c).to_string());
            format!("'{}'", &quoted[1..quoted.len() - 1])
        }
    }
}

fn invalid_character(c: u8, context: &str) -> String {
    format!("invalid character {} {context}", quote_char(c))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::Registry;
    use serde_json::json;

    const KEY_MSG: &str = "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')";

    fn rendered(causes: &[Cause]) -> Vec<String> {
        causes.iter().map(ToString::to_string).collect()
    }

    fn b64(s: &str) -> String {
        base64::engine::general_purpose::STANDARD.encode(s)
    }

    #[test]
    fn a_config_map_key_with_a_space_gets_the_real_cause() {
        let causes = validate_config_map(&json!({"data": {"a b": "x", "ok": "y"}}));
        assert_eq!(
            rendered(&causes),
            vec![format!("data[a b]: Invalid value: \"a b\": {KEY_MSG}")]
        );
        assert_eq!(causes[0].field, "data[a b]");
        assert_eq!(causes[0].reason, "FieldValueInvalid");
    }

    #[test]
    fn binary_data_keys_and_keys_in_both_maps_are_refused() {
        let causes = validate_config_map(&json!({
            "data": {"k": "x", "..": "y"},
            "binaryData": {"k": "eA==", ".": "eA==", "..a": "eA=="}
        }));
        assert_eq!(
            rendered(&causes),
            vec![
                "data[..]: Invalid value: \"..\": must not be '..'",
                "data[k]: Invalid value: \"k\": duplicate of key present in binaryData",
                "binaryData[.]: Invalid value: \".\": must not be '.'",
                "binaryData[..a]: Invalid value: \"..a\": must not start with '..'",
            ]
        );
    }

    #[test]
    fn a_config_map_over_one_mebibyte_is_too_long_as_a_whole() {
        let half = "x".repeat(MAX_SECRET_SIZE / 2);
        let fits = json!({"data": {"a": half}, "binaryData": {"b": b64(&half)}});
        assert!(validate_config_map(&fits).is_empty());
        let over = json!({"data": {"a": half, "c": "x"}, "binaryData": {"b": b64(&half)}});
        assert_eq!(
            rendered(&validate_config_map(&over)),
            vec!["[]: Too long: may not be more than 1048576 bytes"]
        );
    }

    #[test]
    fn secret_keys_from_data_and_string_data_are_reported_under_data() {
        // Defaulting has merged stringData into data by the time validation runs.
        let causes =
            validate_secret(&json!({"type": "Opaque", "data": {"a b": b64("x"), "c d": b64("y")}}));
        assert_eq!(
            rendered(&causes),
            vec![
                format!("data[a b]: Invalid value: \"a b\": {KEY_MSG}"),
                format!("data[c d]: Invalid value: \"c d\": {KEY_MSG}"),
            ]
        );
        let big = json!({"data": {"a": b64(&"x".repeat(MAX_SECRET_SIZE + 1))}});
        assert_eq!(
            rendered(&validate_secret(&big)),
            vec!["data: Too long: may not be more than 1048576 bytes"]
        );
    }

    #[test]
    fn secret_types_require_their_keys() {
        let tls = validate_secret(&json!({"type": "kubernetes.io/tls", "data": {}}));
        assert_eq!(
            rendered(&tls),
            vec![
                "data[tls.crt]: Required value",
                "data[tls.key]: Required value"
            ]
        );
        let token = validate_secret(&json!({"type": "kubernetes.io/service-account-token"}));
        assert_eq!(
            rendered(&token),
            vec!["metadata.annotations[kubernetes.io/service-account.name]: Required value"]
        );
        let basic =
            validate_secret(&json!({"type": "kubernetes.io/basic-auth", "data": {"password": ""}}));
        assert!(basic.is_empty());
        let basic = validate_secret(&json!({"type": "kubernetes.io/basic-auth"}));
        assert_eq!(basic.len(), 2);
        let ssh = validate_secret(
            &json!({"type": "kubernetes.io/ssh-auth", "data": {"ssh-privatekey": ""}}),
        );
        assert_eq!(rendered(&ssh), vec!["data[ssh-privatekey]: Required value"]);
        assert!(validate_secret(&json!({"type": "example.com/anything"})).is_empty());
    }

    #[test]
    fn docker_configs_must_be_json_objects_with_go_s_messages() {
        let secret = |text: &str| json!({"type": "kubernetes.io/dockerconfigjson", "data": {".dockerconfigjson": b64(text)}});
        assert!(validate_secret(&secret("{\"auths\": {}}")).is_empty());
        assert!(validate_secret(&secret("null")).is_empty());
        assert_eq!(
            rendered(&validate_secret(&secret("[1]"))),
            vec![
                "data[.dockerconfigjson]: Invalid value: \"<secret contents redacted>\": json: cannot unmarshal array into Go value of type map[string]interface {}"
            ]
        );
        assert_eq!(
            rendered(&validate_secret(
                &json!({"type": "kubernetes.io/dockercfg"})
            )),
            vec!["data[.dockercfg]: Required value"]
        );
    }

    #[test]
    fn the_scanner_words_syntax_errors_as_encoding_json() {
        let error = |text: &str| json_object_error(text.as_bytes());
        assert_eq!(error("{}"), None);
        assert_eq!(error(""), Some(END.to_string()));
        assert_eq!(error("{\"a\":"), Some(END.to_string()));
        assert_eq!(
            error("not json").as_deref(),
            Some("invalid character 'o' in literal null (expecting 'u')")
        );
        assert_eq!(
            error("x").as_deref(),
            Some("invalid character 'x' looking for beginning of value")
        );
        assert_eq!(
            error("{1}").as_deref(),
            Some("invalid character '1' looking for beginning of object key string")
        );
        assert_eq!(
            error("{\"a\" 1}").as_deref(),
            Some("invalid character '1' after object key")
        );
        assert_eq!(
            error("{\"a\":1 2}").as_deref(),
            Some("invalid character '2' after object key:value pair")
        );
        assert_eq!(
            error("[1 2]").as_deref(),
            Some("invalid character '2' after array element")
        );
        assert_eq!(
            error("{} {}").as_deref(),
            Some("invalid character '{' after top-level value")
        );
        assert_eq!(
            error("\"a\nb\"").as_deref(),
            Some("invalid character '\\n' in string literal")
        );
        assert_eq!(
            error("\"\\x\"").as_deref(),
            Some("invalid character 'x' in string escape code")
        );
        assert_eq!(
            error("-a").as_deref(),
            Some("invalid character 'a' in numeric literal")
        );
        assert_eq!(
            error("1.x").as_deref(),
            Some("invalid character 'x' after decimal point in numeric literal")
        );
        assert_eq!(
            error("1ex").as_deref(),
            Some("invalid character 'x' in exponent of numeric literal")
        );
        assert_eq!(
            error("01").as_deref(),
            Some("invalid character '1' after top-level value")
        );
        assert_eq!(
            error("{\"a'\":'}").as_deref(),
            Some("invalid character '\\'' looking for beginning of value")
        );
    }

    #[test]
    fn only_config_maps_and_secrets_are_checked() {
        let r = Registry::new();
        let lease = r.lookup("coordination.k8s.io", "v1", "leases").unwrap();
        assert!(validate(lease, &json!({"data": {"a b": "x"}})).is_empty());
        let cm = r.lookup("", "v1", "configmaps").unwrap();
        assert_eq!(validate(cm, &json!({"data": {"a b": "x"}})).len(), 1);
    }
}

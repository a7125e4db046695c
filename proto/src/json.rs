//! The one conversion between `google.protobuf.Struct` / `Value` and JSON,
//! shared by the server, the Rust SDK and the tests.
//!
//! Protobuf carries every number as a double; integral doubles within ±2^53
//! (where every integer is exact) come back as JSON integers, so a count sent
//! as `5` reads back as `5`, not `5.0`. NaN and infinities, which JSON cannot
//! hold, become null.
//!
//! Values are bounded in depth by [`MAX_DEPTH`]: the transport's protobuf
//! decoder refuses messages nested much deeper than that (its recursion limit
//! counts three message levels per JSON object), so the limit is set where
//! every message of the contract that carries a `Struct` still decodes, and
//! the server refuses anything deeper with a field pointer. The JSON strings
//! and keys converge stores cannot contain U+0000 (PostgreSQL's `jsonb` has no
//! representation for it), which [`check_storable`] refuses the same way.

use prost_types::value::Kind;
use serde_json::{Map, Number, Value};

/// The deepest nesting of objects and arrays a value may have. `{}` has depth
/// 1, `{"a": {"b": 1}}` depth 2, `{"a": [1]}` depth 2.
pub const MAX_DEPTH: usize = 24;

/// Largest magnitude at which every integer is exactly representable in an
/// f64 (2^53).
const MAX_SAFE_INTEGER: f64 = 9_007_199_254_740_992.0;

/// Why a protobuf value has no JSON form converge accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JsonError {
    /// Objects and arrays nest deeper than [`MAX_DEPTH`]; `pointer` names the
    /// first container past the limit (relative to the converted value).
    TooDeep {
        /// JSON pointer of the offending container.
        pointer: String,
    },
    /// A string or key contains U+0000; `pointer` names it.
    NulCharacter {
        /// JSON pointer of the offending value (or of the member whose key
        /// holds the character).
        pointer: String,
    },
}

impl JsonError {
    /// The JSON pointer of the offending value, relative to the converted one.
    pub fn pointer(&self) -> &str {
        match self {
            JsonError::TooDeep { pointer } | JsonError::NulCharacter { pointer } => pointer,
        }
    }

    /// What is wrong, without the offending value.
    pub fn description(&self) -> String {
        match self {
            JsonError::TooDeep { .. } => {
                format!("nests objects and arrays deeper than {MAX_DEPTH} levels")
            }
            JsonError::NulCharacter { .. } => "contains the character U+0000, which cannot be stored".to_owned(),
        }
    }
}

impl std::fmt::Display for JsonError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let pointer = self.pointer();
        if pointer.is_empty() {
            f.write_str(&self.description())
        } else {
            write!(f, "{pointer}: {}", self.description())
        }
    }
}

impl std::error::Error for JsonError {}

/// A `Struct` as a JSON object. Nothing is refused here: the depth the
/// transport decodes is already bounded; see [`storable_struct_to_json`] for
/// what converge stores.
pub fn struct_to_json(value: prost_types::Struct) -> Value {
    Value::Object(
        value
            .fields
            .into_iter()
            .map(|(key, value)| (key, value_to_json(value)))
            .collect(),
    )
}

/// A `Value` as JSON.
pub fn value_to_json(value: prost_types::Value) -> Value {
    match value.kind {
        None | Some(Kind::NullValue(_)) => Value::Null,
        Some(Kind::BoolValue(b)) => Value::Bool(b),
        Some(Kind::NumberValue(n)) => number_to_json(n),
        Some(Kind::StringValue(s)) => Value::String(s),
        Some(Kind::StructValue(s)) => struct_to_json(s),
        Some(Kind::ListValue(list)) => Value::Array(list.values.into_iter().map(value_to_json).collect()),
    }
}

/// A `Struct` as a JSON object converge can store: refused when it nests
/// deeper than [`MAX_DEPTH`] or holds U+0000 (see [`check_storable`]).
pub fn storable_struct_to_json(value: prost_types::Struct) -> Result<Value, JsonError> {
    let json = struct_to_json(value);
    check_storable(&json)?;
    Ok(json)
}

/// Whether converge can store `value`: at most [`MAX_DEPTH`] levels of
/// objects and arrays, and no U+0000 in a string or key. The error points at
/// the first offending place.
pub fn check_storable(value: &Value) -> Result<(), JsonError> {
    let mut path = Vec::new();
    walk(value, 0, &mut path)
}

/// One step of a JSON pointer.
enum Token<'a> {
    Key(&'a str),
    Index(usize),
}

fn walk<'a>(value: &'a Value, depth: usize, path: &mut Vec<Token<'a>>) -> Result<(), JsonError> {
    let container = matches!(value, Value::Array(_) | Value::Object(_));
    if container && depth + 1 > MAX_DEPTH {
        return Err(JsonError::TooDeep { pointer: pointer(path) });
    }
    match value {
        Value::String(s) if s.contains('\0') => Err(JsonError::NulCharacter { pointer: pointer(path) }),
        Value::Array(items) => {
            for (index, item) in items.iter().enumerate() {
                path.push(Token::Index(index));
                let checked = walk(item, depth + 1, path);
                path.pop();
                checked?;
            }
            Ok(())
        }
        Value::Object(map) => {
            for (key, item) in map {
                path.push(Token::Key(key));
                let checked = if key.contains('\0') {
                    Err(JsonError::NulCharacter { pointer: pointer(path) })
                } else {
                    walk(item, depth + 1, path)
                };
                path.pop();
                checked?;
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// A double as a JSON number: integral ones within ±2^53 as integers.
pub fn number_to_json(n: f64) -> Value {
    if n.is_finite() && n.fract() == 0.0 && n.abs() <= MAX_SAFE_INTEGER {
        // Integral and within ±2^53, so exactly an i64.
        Value::Number(Number::from(n as i64))
    } else {
        Number::from_f64(n).map(Value::Number).unwrap_or(Value::Null)
    }
}

/// A JSON object as a `Struct`; anything else is `None`.
pub fn json_to_struct(value: &Value) -> Option<prost_types::Struct> {
    match value {
        Value::Object(map) => Some(map_to_struct(map)),
        _ => None,
    }
}

fn map_to_struct(map: &Map<String, Value>) -> prost_types::Struct {
    prost_types::Struct {
        fields: map.iter().map(|(k, v)| (k.clone(), json_to_value(v))).collect(),
    }
}

/// JSON as a `Value`. Numbers travel as doubles, so integers beyond 2^53 lose
/// precision (a protobuf limitation).
pub fn json_to_value(value: &Value) -> prost_types::Value {
    let kind = match value {
        Value::Null => Kind::NullValue(prost_types::NullValue::NullValue as i32),
        Value::Bool(b) => Kind::BoolValue(*b),
        Value::Number(n) => Kind::NumberValue(n.as_f64().unwrap_or(f64::NAN)),
        Value::String(s) => Kind::StringValue(s.clone()),
        Value::Array(items) => Kind::ListValue(prost_types::ListValue {
            values: items.iter().map(json_to_value).collect(),
        }),
        Value::Object(map) => Kind::StructValue(map_to_struct(map)),
    };
    prost_types::Value { kind: Some(kind) }
}

/// The depth of a JSON value: 0 for a scalar, 1 for a flat object or array.
pub fn depth(value: &Value) -> usize {
    match value {
        Value::Array(items) => 1 + items.iter().map(depth).max().unwrap_or(0),
        Value::Object(map) => 1 + map.values().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

/// Integral doubles within ±2^53 as integers, recursively (for JSON that did
/// not come through [`struct_to_json`], e.g. parsed from a file).
pub fn normalize_numbers(value: Value) -> Value {
    match value {
        Value::Number(n) if n.is_f64() => n.as_f64().map_or(Value::Number(n), number_to_json),
        Value::Array(items) => Value::Array(items.into_iter().map(normalize_numbers).collect()),
        Value::Object(map) => Value::Object(map.into_iter().map(|(k, v)| (k, normalize_numbers(v))).collect()),
        other => other,
    }
}

/// A JSON pointer (RFC 6901) of `path`.
fn pointer(path: &[Token<'_>]) -> String {
    let mut out = String::new();
    for token in path {
        out.push('/');
        match token {
            Token::Key(key) => out.push_str(&key.replace('~', "~0").replace('/', "~1")),
            Token::Index(index) => out.push_str(&index.to_string()),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use prost::Message;
    use serde_json::json;

    use super::*;
    use crate::{v1, worker_v1};

    fn nested(depth: usize) -> Value {
        let mut value = json!(1);
        for i in 0..depth {
            value = if i % 2 == 0 {
                json!({ "a": value })
            } else {
                json!([value])
            };
        }
        value
    }

    #[test]
    fn structs_round_trip_with_integers() {
        let doc = json!({"name": "a", "port": 80, "ratio": 0.5, "tags": ["x", null, true], "nested": {"k": {}}});
        let back = storable_struct_to_json(json_to_struct(&doc).unwrap_or_default());
        assert_eq!(back, Ok(doc));
        assert_eq!(
            number_to_json(9_007_199_254_740_992.0),
            json!(9_007_199_254_740_992_i64)
        );
        assert!(number_to_json(1e300).is_f64());
        assert_eq!(number_to_json(f64::NAN), Value::Null);
    }

    #[test]
    fn depth_is_bounded_with_a_pointer() {
        let ok = json!({ "a": nested(MAX_DEPTH - 1) });
        assert_eq!(depth(&ok), MAX_DEPTH);
        assert!(storable_struct_to_json(json_to_struct(&ok).unwrap_or_default()).is_ok());
        let deep = json!({ "x": ok });
        let err = storable_struct_to_json(json_to_struct(&deep).unwrap_or_default());
        let Err(JsonError::TooDeep { pointer }) = err else {
            panic!("expected TooDeep, got {err:?}");
        };
        assert!(pointer.starts_with("/x/a/"), "{pointer}");
    }

    #[test]
    fn nul_characters_are_refused_in_values_and_keys() {
        let err = check_storable(&json!({"a": [1, "x\u{0}y"]}));
        assert_eq!(err, Err(JsonError::NulCharacter { pointer: "/a/1".into() }));
        assert_eq!(
            normalize_numbers(json!({"a": 3.0, "b": [1.5, 2.0]})),
            json!({"a": 3, "b": [1.5, 2]})
        );
        let err = check_storable(&json!({"a/b": {"k\u{0}": 1}}));
        assert_eq!(
            err,
            Err(JsonError::NulCharacter {
                pointer: "/a~1b/k\u{0}".into()
            })
        );
    }

    /// Every message that carries a `Struct` must decode a value of
    /// `MAX_DEPTH`; otherwise the decoder, not converge, would decide the
    /// limit.
    #[test]
    fn the_deepest_messages_decode_values_of_the_limit() {
        let value = json!({ "a": nested(MAX_DEPTH - 1) });
        assert_eq!(depth(&value), MAX_DEPTH);
        let spec = json_to_struct(&value);
        let batch = v1::BatchApplyResourcesRequest {
            requests: vec![v1::ApplyResourceRequest {
                spec: spec.clone(),
                ..Default::default()
            }],
            ..Default::default()
        };
        assert!(v1::BatchApplyResourcesRequest::decode(batch.encode_to_vec().as_slice()).is_ok());
        let complete = worker_v1::WorkStreamRequest {
            payload: Some(worker_v1::work_stream_request::Payload::Complete(
                worker_v1::StageComplete {
                    compose_result: Some(worker_v1::ComposeResult {
                        desired: vec![worker_v1::ChildSpec {
                            spec: spec.clone(),
                            ..Default::default()
                        }],
                        ..Default::default()
                    }),
                    ..Default::default()
                },
            )),
        };
        assert!(worker_v1::WorkStreamRequest::decode(complete.encode_to_vec().as_slice()).is_ok());
        // Far deeper values are refused by the decoder itself.
        let far = v1::ApplyResourceRequest {
            spec: json_to_struct(&json!({ "a": nested(80) })),
            ..Default::default()
        };
        assert!(v1::ApplyResourceRequest::decode(far.encode_to_vec().as_slice()).is_err());
    }
}

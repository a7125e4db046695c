//! JSON Schema documents carried by kind manifests (`spec_schema`, `status_schema`, `config_schema`).
//!
//! Every schema is interpreted as JSON Schema draft 2020-12, whatever its `$schema` keyword says:
//! the keyword is accepted (it must still be a string, as the meta-schema requires) but has no
//! effect on semantics. Remote references are never fetched: a `$ref` that does not resolve inside
//! the document itself makes the schema invalid.
//!
//! Error locations:
//! - problems with a schema are reported at `field` + the JSON pointer into the schema document
//!   (e.g. `/manifest/spec_schema/properties/port/type`);
//! - problems with an instance are reported at `field` + the JSON pointer into the instance
//!   (e.g. `/spec/ports/0/number`). Keywords that judge an object as a whole (`required`,
//!   `additionalProperties`, `unevaluatedProperties`, `minProperties`, `dependentRequired`, …) point
//!   at the object that holds (or lacks) the properties, and the description names them: a missing
//!   property has no location of its own.
//!
//! Formats (`"format": "email"` …) are annotations only, as draft 2020-12 specifies by default.

use std::fmt;
use std::io;
use std::sync::Arc;

use jsonschema::error::ValidationErrorKind;
use jsonschema::{Draft, ReferencingError, ValidationError, Validator};
use serde_json::Value;

use super::rules::Rules;
use super::violation::Violation;

/// Largest accepted schema document, measured as its compact JSON serialization (1 MiB).
pub const MAX_SCHEMA_BYTES: usize = 1024 * 1024;

/// Most violations reported for one schema or one instance; further ones are summarised in a
/// single trailing violation.
pub const MAX_VIOLATIONS: usize = 100;

/// Longest description of a single violation, in bytes; longer messages (they quote the offending
/// value) are shortened.
const MAX_DESCRIPTION_BYTES: usize = 512;

/// A schema that passed the draft 2020-12 meta-schema and compiled. Cloning is cheap (the
/// validator is reference-counted) and the value is `Send + Sync`.
#[derive(Clone)]
pub struct CompiledSchema {
    validator: Arc<Validator>,
    /// Its `x-converge-validations` rules (ADR 49); empty for most schemas.
    rules: Arc<Rules>,
}

impl fmt::Debug for CompiledSchema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CompiledSchema").finish_non_exhaustive()
    }
}

/// Checks `schema` (found at the request location `field`) and compiles it.
///
/// The schema must be a JSON object of at most [`MAX_SCHEMA_BYTES`], valid against the draft 2020-12
/// meta-schema, and compilable (valid regular expressions, every `$ref` resolvable inside the
/// document). Every meta-schema violation is reported (up to [`MAX_VIOLATIONS`]); a compilation
/// failure is reported once, at the best location known.
pub fn compile(field: &str, schema: &Value) -> Result<CompiledSchema, Vec<Violation>> {
    if !schema.is_object() {
        return Err(vec![Violation::new(field, "a schema must be a JSON object")]);
    }
    if !fits_in(schema, MAX_SCHEMA_BYTES) {
        return Err(vec![Violation::new(
            field,
            format!("the schema is larger than the limit of {MAX_SCHEMA_BYTES} bytes"),
        )]);
    }

    let meta = jsonschema::draft202012::meta::validator();
    let violations = collect_capped(field, meta.iter_errors(schema), |error| {
        Violation::new(
            join(field, error.instance_path().as_str()),
            shorten(format!("invalid schema: {}", message(&error))),
        )
    });
    if !violations.is_empty() {
        return Err(violations);
    }

    // The validator honours a "$schema" found in a subschema (it switches drafts there), so the copy
    // that is compiled has every "$schema" keyword removed. Removing object members never moves
    // other members, so the pointers in compilation errors still address the caller's document.
    let mut forced = schema.clone();
    strip_dialects(&mut forced);
    let built = jsonschema::options()
        .with_draft(Draft::Draft202012)
        .offline()
        .build(&forced);
    let validator = built.map_err(|error| vec![compile_violation(field, schema, &error)])?;
    let rules = Rules::compile(field, schema)?;
    Ok(CompiledSchema {
        validator: Arc::new(validator),
        rules: Arc::new(rules),
    })
}

impl CompiledSchema {
    /// Validates `instance` (found at the request location `field`, e.g. `/spec`).
    ///
    /// Returns one violation per failed keyword, located at `field` + the pointer into the
    /// instance, at most [`MAX_VIOLATIONS`] of them followed by one saying how many were omitted.
    pub fn validate(&self, field: &str, instance: &Value) -> Result<(), Vec<Violation>> {
        let mut violations = collect_capped(field, self.validator.iter_errors(instance), |error| {
            Violation::new(
                join(field, error.instance_path().as_str()),
                shorten(format!("{} ({})", message(&error), error.kind().keyword())),
            )
        });
        // Rules judge documents of the schema's shape only.
        if violations.is_empty() && !self.rules.is_empty() {
            violations = self.rules.check(field, instance);
        }
        if violations.is_empty() { Ok(()) } else { Err(violations) }
    }

    /// Judges an update of `old` to `instance` by the schema's transition
    /// rules (those that read `oldSelf`).
    pub fn validate_transition(&self, field: &str, instance: &Value, old: &Value) -> Result<(), Vec<Violation>> {
        if !self.rules.has_transitions() {
            return Ok(());
        }
        let violations = self.rules.check_transition(field, instance, old);
        if violations.is_empty() { Ok(()) } else { Err(violations) }
    }

    /// Whether the schema has transition rules.
    pub fn has_transition_rules(&self) -> bool {
        self.rules.has_transitions()
    }

    /// Whether `instance` satisfies the schema; cheaper than [`CompiledSchema::validate`].
    pub fn is_valid(&self, instance: &Value) -> bool {
        self.validator.is_valid(instance) && (self.rules.is_empty() || self.rules.check("", instance).is_empty())
    }
}

/// Maps up to [`MAX_VIOLATIONS`] errors to violations, sorted by field (stable), and appends a
/// summary of the omitted remainder.
fn collect_capped<'a>(
    field: &str,
    errors: impl Iterator<Item = ValidationError<'a>>,
    to_violation: impl Fn(ValidationError<'a>) -> Violation,
) -> Vec<Violation> {
    let mut violations = Vec::new();
    let mut omitted = 0usize;
    for error in errors {
        if violations.len() < MAX_VIOLATIONS {
            violations.push(to_violation(error));
        } else {
            omitted += 1;
        }
    }
    violations.sort_by(|a, b| pointer_order(&a.field, &b.field));
    if omitted > 0 {
        violations.push(Violation::new(
            field,
            format!("{omitted} more violation(s) omitted (only the first {MAX_VIOLATIONS} are reported)"),
        ));
    }
    violations
}

/// Orders JSON pointers token by token, array indices numerically ("/a/2" before "/a/10").
fn pointer_order(a: &str, b: &str) -> std::cmp::Ordering {
    let token = |t: &str| (t.parse::<u64>().ok(), t.to_owned());
    let key = |p: &str| p.split('/').map(token).collect::<Vec<_>>();
    key(a).cmp(&key(b))
}

/// The readable message of an error; for `anyOf`/`oneOf` failures the messages of the failed
/// alternatives are appended, since the bare summary does not say what was expected.
fn message(error: &ValidationError<'_>) -> String {
    let summary = error.to_string();
    let alternatives = match error.kind() {
        ValidationErrorKind::AnyOf { context } | ValidationErrorKind::OneOfNotValid { context } => context,
        _ => return summary,
    };
    let details: Vec<String> = alternatives.iter().flatten().map(ToString::to_string).collect();
    if details.is_empty() {
        summary
    } else {
        format!("{summary}: {}", details.join("; "))
    }
}

/// The violation for a schema that passed the meta-schema but did not compile.
fn compile_violation(field: &str, schema: &Value, error: &ValidationError<'_>) -> Violation {
    match error.kind() {
        ValidationErrorKind::Referencing(reference) => {
            let location = find_reference(schema, reference).unwrap_or_default();
            Violation::new(join(field, &location), shorten(describe_reference(reference)))
        }
        ValidationErrorKind::Format { format } if format == "regex" => Violation::new(
            join(field, error.instance_path().as_str()),
            shorten(format!(
                "{} is not a valid regular expression (ECMA-262)",
                error.instance()
            )),
        ),
        _ => Violation::new(
            join(field, error.instance_path().as_str()),
            shorten(format!("invalid schema: {}", message(error))),
        ),
    }
}

fn describe_reference(error: &ReferencingError) -> String {
    match error {
        ReferencingError::Unretrievable { uri, .. } => format!(
            "reference to {uri} cannot be resolved: only references inside the schema document are supported \
             (remote references are never fetched)"
        ),
        ReferencingError::PointerToNowhere { pointer } => {
            format!("reference target {pointer} does not exist in the schema document")
        }
        other => format!("invalid reference: {other}"),
    }
}

/// Best-effort location (a pointer into `schema`, ending in `/$ref` or `/$dynamicRef`) of the
/// reference that caused `error`. The referencing error names the target, not the referring place,
/// so the first reference whose value matches the target is chosen.
fn find_reference(schema: &Value, error: &ReferencingError) -> Option<String> {
    let mut references = Vec::new();
    collect_references(schema, String::new(), &mut references);
    let matches = |value: &str| -> bool {
        let (base, fragment) = match value.split_once('#') {
            Some((base, fragment)) => (base, Some(fragment)),
            None => (value, None),
        };
        match error {
            ReferencingError::Unretrievable { uri, .. } => {
                let uri = uri.split_once('#').map_or(uri.as_str(), |(base, _)| base);
                !base.is_empty() && (uri == base || uri.ends_with(base.trim_start_matches("./")))
            }
            ReferencingError::PointerToNowhere { pointer } => fragment == Some(pointer.as_str()),
            ReferencingError::NoSuchAnchor { anchor } | ReferencingError::InvalidAnchor { anchor } => {
                fragment == Some(anchor.as_str())
            }
            ReferencingError::InvalidPercentEncoding { pointer, .. }
            | ReferencingError::InvalidArrayIndex { pointer, .. } => fragment == Some(pointer.as_str()),
            _ => false,
        }
    };
    references
        .into_iter()
        .find(|(_, value)| matches(value))
        .map(|(location, _)| location)
}

/// Keywords whose value is plain data, never a subschema.
const DATA_KEYWORDS: &[&str] = &["const", "enum", "default", "examples"];

/// Keywords whose value is an object mapping names to subschemas (the names are not keywords).
const SCHEMA_MAP_KEYWORDS: &[&str] = &[
    "properties",
    "patternProperties",
    "$defs",
    "definitions",
    "dependentSchemas",
    "dependencies",
];

/// Calls `visit` on every object of `value` that may be used as a schema, with its pointer.
/// Values of data keywords are skipped; members of name-to-schema maps are visited without treating
/// the names as keywords. Other members (including unknown keywords, which `$ref` may target) are
/// searched.
fn walk_schemas(value: &Value, location: String, visit: &mut impl FnMut(&Value, &str)) {
    match value {
        Value::Object(members) => {
            visit(value, &location);
            for (key, child) in members {
                let child_location = format!("{location}/{}", escape(key));
                if DATA_KEYWORDS.contains(&key.as_str()) {
                    continue;
                }
                if SCHEMA_MAP_KEYWORDS.contains(&key.as_str()) {
                    if let Value::Object(map) = child {
                        for (name, subschema) in map {
                            walk_schemas(subschema, format!("{child_location}/{}", escape(name)), visit);
                        }
                    }
                    continue;
                }
                walk_schemas(child, child_location, visit);
            }
        }
        Value::Array(items) => {
            for (index, item) in items.iter().enumerate() {
                walk_schemas(item, format!("{location}/{index}"), visit);
            }
        }
        _ => {}
    }
}

fn collect_references(schema: &Value, location: String, out: &mut Vec<(String, String)>) {
    walk_schemas(schema, location, &mut |object, at| {
        for keyword in ["$ref", "$dynamicRef"] {
            if let Some(Value::String(target)) = object.get(keyword) {
                out.push((format!("{at}/{}", escape(keyword)), target.clone()));
            }
        }
    });
}

/// Removes every `$schema` keyword from the schema positions of `value` (mutable twin of
/// [`walk_schemas`]).
fn strip_dialects(value: &mut Value) {
    match value {
        Value::Object(members) => {
            members.remove("$schema");
            for (key, child) in members.iter_mut() {
                if DATA_KEYWORDS.contains(&key.as_str()) {
                    continue;
                }
                if SCHEMA_MAP_KEYWORDS.contains(&key.as_str()) {
                    if let Value::Object(map) = child {
                        map.values_mut().for_each(strip_dialects);
                    }
                    continue;
                }
                strip_dialects(child);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(strip_dialects),
        _ => {}
    }
}

/// Escapes one JSON pointer reference token (RFC 6901).
fn escape(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}

/// `field` followed by `pointer` (which is empty or starts with '/').
fn join(field: &str, pointer: &str) -> String {
    format!("{field}{pointer}")
}

/// Cuts `text` to at most [`MAX_DESCRIPTION_BYTES`] bytes on a character boundary.
fn shorten(mut text: String) -> String {
    if text.len() > MAX_DESCRIPTION_BYTES {
        let mut end = MAX_DESCRIPTION_BYTES - '…'.len_utf8();
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push('…');
    }
    text
}

/// Whether the compact serialization of `value` takes at most `limit` bytes. Serialization stops
/// as soon as the limit is passed, so an oversized document is never buffered.
fn fits_in(value: &Value, limit: usize) -> bool {
    struct Budget {
        left: usize,
    }
    impl io::Write for Budget {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            if buf.len() > self.left {
                return Err(io::Error::other("size limit exceeded"));
            }
            self.left -= buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
    serde_json::to_writer(Budget { left: limit }, value).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn fields(violations: &[Violation]) -> Vec<&str> {
        violations.iter().map(|v| v.field.as_str()).collect()
    }

    fn compiled(schema: Value) -> CompiledSchema {
        compile("/manifest/spec_schema", &schema).expect("schema compiles")
    }

    fn ports_schema() -> Value {
        json!({
            "type": "object",
            "required": ["name"],
            "properties": {
                "name": {"type": "string"},
                "ports": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["number"],
                        "properties": {"number": {"type": "integer", "minimum": 1, "maximum": 65535}}
                    }
                },
                "meta": {
                    "type": "object",
                    "properties": {"owner": {"type": "object", "properties": {"email": {"type": "string"}}}},
                    "additionalProperties": false
                }
            }
        })
    }

    #[test]
    fn compiled_schema_is_send_sync_and_shareable() {
        fn assert_send_sync<T: Send + Sync + 'static>() {}
        assert_send_sync::<CompiledSchema>();
        assert_send_sync::<Arc<CompiledSchema>>();
    }

    #[test]
    fn valid_instance_passes() {
        let schema = compiled(ports_schema());
        let instance = json!({"name": "web", "ports": [{"number": 80}, {"number": 443}]});
        assert_eq!(schema.validate("/spec", &instance), Ok(()));
        assert!(schema.is_valid(&instance));
    }

    #[test]
    fn nested_errors_have_instance_pointers() {
        let schema = compiled(ports_schema());
        let instance = json!({
            "name": "web",
            "ports": [{"number": 80}, {"number": 70000}, {}],
            "meta": {"owner": {"email": 7}, "extra": true}
        });
        let violations = schema.validate("/spec", &instance).expect_err("invalid");
        assert_eq!(
            fields(&violations),
            vec![
                "/spec/meta",
                "/spec/meta/owner/email",
                "/spec/ports/1/number",
                "/spec/ports/2"
            ]
        );
        let by_field = |f: &str| violations.iter().find(|v| v.field == f).expect("present");
        assert!(by_field("/spec/ports/1/number").description.contains("maximum"));
        // `required` points at the object that lacks the property and names the property.
        let missing = by_field("/spec/ports/2");
        assert!(missing.description.contains("\"number\""), "{missing:?}");
        assert!(missing.description.contains("required"), "{missing:?}");
        // additionalProperties also points at the object holding the unexpected member.
        assert!(by_field("/spec/meta").description.contains("extra"));
    }

    #[test]
    fn root_errors_use_the_bare_field() {
        let schema = compiled(ports_schema());
        let violations = schema
            .validate("/spec", &json!({"ports": []}))
            .expect_err("name missing");
        assert_eq!(fields(&violations), vec!["/spec"]);
        assert!(violations[0].description.contains("\"name\""));
        let violations = schema.validate("/spec", &json!([1])).expect_err("not an object");
        assert_eq!(fields(&violations), vec!["/spec"]);
        assert!(violations[0].description.contains("type"));
    }

    #[test]
    fn pointer_tokens_are_escaped() {
        let schema = compiled(json!({"properties": {"a/b": {"properties": {"c~d": {"type": "string"}}}}}));
        let violations = schema
            .validate("/spec", &json!({"a/b": {"c~d": 1}}))
            .expect_err("invalid");
        assert_eq!(fields(&violations), vec!["/spec/a~1b/c~0d"]);

        let err = compile("/s", &json!({"properties": {"a/b": {"type": "nope"}}})).expect_err("bad");
        assert_eq!(fields(&err), vec!["/s/properties/a~1b/type"]);
    }

    #[test]
    fn violations_are_capped() {
        let schema = compiled(json!({"type": "array", "items": {"type": "string"}}));
        let instance = Value::Array((0..130).map(|i| json!(i)).collect());
        let violations = schema.validate("/spec", &instance).expect_err("invalid");
        assert_eq!(violations.len(), MAX_VIOLATIONS + 1);
        let last = violations.last().expect("summary");
        assert_eq!(last.field, "/spec");
        assert!(last.description.contains("30 more"), "{last:?}");
        assert!(
            violations[..MAX_VIOLATIONS]
                .iter()
                .all(|v| v.field.starts_with("/spec/"))
        );
    }

    #[test]
    fn violations_are_ordered_by_location() {
        let schema = compiled(json!({"items": {"type": "string"}}));
        let instance = Value::Array((0..12).map(|i| json!(i)).collect());
        let violations = schema.validate("/spec", &instance).expect_err("invalid");
        let expected: Vec<String> = (0..12).map(|i| format!("/spec/{i}")).collect();
        assert_eq!(fields(&violations), expected);
    }

    #[test]
    fn metaschema_reference_resolves_offline() {
        // The draft 2020-12 meta-schema is bundled, so referring to it works without any fetching.
        let schema = compiled(json!({"$ref": "https://json-schema.org/draft/2020-12/schema"}));
        assert!(schema.is_valid(&json!({"type": "string"})));
        assert!(!schema.is_valid(&json!({"type": 5})));
    }

    #[test]
    fn long_messages_are_shortened() {
        let schema = compiled(json!({"type": "string"}));
        let big = json!({"k": "x".repeat(10_000)});
        let violations = schema.validate("/spec", &big).expect_err("invalid");
        assert!(violations[0].description.len() <= MAX_DESCRIPTION_BYTES);
        assert!(violations[0].description.ends_with('…'));
    }

    #[test]
    fn bad_type_is_located_in_the_schema() {
        let err = compile(
            "/manifest/spec_schema",
            &json!({"properties": {"port": {"type": "integr"}}}),
        )
        .expect_err("bad type");
        assert_eq!(fields(&err), vec!["/manifest/spec_schema/properties/port/type"]);
        assert!(err[0].description.contains("integr"));
    }

    #[test]
    fn every_meta_schema_error_is_reported() {
        let schema = json!({
            "type": 5,
            "required": "name",
            "properties": {"a": {"minLength": -1}, "b": {"enum": 3}}
        });
        let err = compile("/manifest/config_schema", &schema).expect_err("bad");
        assert_eq!(
            fields(&err),
            vec![
                "/manifest/config_schema/properties/a/minLength",
                "/manifest/config_schema/properties/b/enum",
                "/manifest/config_schema/required",
                "/manifest/config_schema/type",
            ]
        );
    }

    #[test]
    fn invalid_regex_is_located() {
        let err = compile(
            "/manifest/spec_schema",
            &json!({"properties": {"a": {"type": "string", "pattern": "(["}}}),
        )
        .expect_err("bad regex");
        assert_eq!(fields(&err), vec!["/manifest/spec_schema/properties/a/pattern"]);
        assert!(err[0].description.contains("regular expression"));

        let err = compile("/s", &json!({"patternProperties": {"a{2,1}": {}}})).expect_err("bad regex");
        assert_eq!(fields(&err), vec!["/s/patternProperties/a{2,1}"]);
    }

    #[test]
    fn non_objects_are_refused() {
        for schema in [json!(true), json!(null), json!([]), json!("x"), json!(1)] {
            let err = compile("/manifest/spec_schema", &schema).expect_err("not an object");
            assert_eq!(fields(&err), vec!["/manifest/spec_schema"]);
        }
    }

    #[test]
    fn oversized_schemas_are_refused() {
        let big = json!({"description": "x".repeat(MAX_SCHEMA_BYTES)});
        let err = compile("/manifest/spec_schema", &big).expect_err("too big");
        assert_eq!(fields(&err), vec!["/manifest/spec_schema"]);
        assert!(err[0].description.contains("larger"));
        // Just under the limit is fine.
        let overhead = serde_json::to_vec(&json!({"description": ""}))
            .map(|v| v.len())
            .unwrap_or_default();
        let fits = json!({"description": "x".repeat(MAX_SCHEMA_BYTES - overhead)});
        assert!(compile("/s", &fits).is_ok());
    }

    #[test]
    fn remote_references_are_refused_without_network() {
        // A never-resolving host and a file: if retrieval were attempted the test would fail or read
        // the file; instead retrieval is disabled and the failure names the reference's location.
        for target in [
            "http://schemas.example.invalid/schema.json",
            "https://example.com/s.json#/$defs/a",
            "file:///etc/hostname",
        ] {
            let schema = json!({"properties": {"a": {"items": {"$ref": target}}}});
            let err = compile("/manifest/spec_schema", &schema).expect_err("remote ref");
            assert_eq!(
                fields(&err),
                vec!["/manifest/spec_schema/properties/a/items/$ref"],
                "{target}"
            );
            assert!(err[0].description.contains("never fetched"), "{err:?}");
        }
        // A relative reference without a base resolves to nothing either.
        let err = compile("/s", &json!({"$defs": {"x": {"$ref": "other.json"}}})).expect_err("relative ref");
        assert_eq!(fields(&err), vec!["/s/$defs/x/$ref"]);
    }

    #[test]
    fn dangling_local_references_are_refused() {
        let schema = json!({"$defs": {"a": {"type": "string"}}, "properties": {"p": {"$ref": "#/$defs/b"}}});
        let err = compile("/manifest/spec_schema", &schema).expect_err("dangling");
        assert_eq!(fields(&err), vec!["/manifest/spec_schema/properties/p/$ref"]);
        assert!(err[0].description.contains("/$defs/b"));
    }

    #[test]
    fn local_references_work() {
        let schema = compiled(json!({
            "$defs": {"port": {"type": "integer", "maximum": 65535}},
            "properties": {"ports": {"type": "array", "items": {"$ref": "#/$defs/port"}}}
        }));
        assert!(schema.is_valid(&json!({"ports": [1, 2]})));
        let err = schema
            .validate("/spec", &json!({"ports": [1, 70000]}))
            .expect_err("invalid");
        assert_eq!(fields(&err), vec!["/spec/ports/1"]);
    }

    #[test]
    fn dialect_is_always_2020_12() {
        let draft7 = "http://json-schema.org/draft-07/schema#";
        // At the root: prefixItems/items have their 2020-12 meaning.
        let schema = compiled(json!({"$schema": draft7, "prefixItems": [{"type": "integer"}], "items": false}));
        assert!(schema.is_valid(&json!([1])));
        assert!(!schema.is_valid(&json!(["a"])));
        assert!(!schema.is_valid(&json!([1, 2])));
        // Nested: a "$schema" inside a subschema does not switch the dialect either.
        let schema = compiled(json!({"properties": {"a": {
            "$schema": draft7, "prefixItems": [{"type": "integer"}], "items": false
        }}}));
        assert!(schema.is_valid(&json!({"a": [1]})));
        assert!(!schema.is_valid(&json!({"a": [1, 2]})));
        // Unknown dialects are ignored too.
        assert!(
            compile(
                "/s",
                &json!({"$schema": "https://example.com/my-dialect", "type": "object"})
            )
            .is_ok()
        );
        // A property literally named "$schema" and data values are left alone.
        let schema = compiled(json!({
            "properties": {"$schema": {"type": "string"}},
            "const": {"$schema": "x"}
        }));
        assert!(schema.is_valid(&json!({"$schema": "x"})));
        assert!(!schema.is_valid(&json!({})));
    }

    #[test]
    fn formats_are_annotations() {
        let schema = compiled(json!({"type": "string", "format": "email"}));
        assert!(schema.is_valid(&json!("not an email")));
    }
}

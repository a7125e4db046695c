//! Spec conversions between versions of a kind (ADR 48): declared by the
//! target version's manifest as CEL expressions over the old spec, checked
//! when the manifest is applied and evaluated by the server, with no worker.
//!
//! A conversion starts from the value of its `spec` expression (or a copy of
//! the old spec), then applies its field edits in order. Expressions see
//! `self` (the old spec), `name` and `labels`. The interpreter has no clock,
//! no randomness and no I/O, and every loop in CEL is a macro over a finite
//! list, so evaluation is deterministic and ends; nesting of those macros
//! and the size of an expression are capped so that a hostile manifest
//! cannot make one conversion expensive.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use cel::Context;
use serde_json::Value;

use super::cel::{self as expr, Budget, Expression, kind_of};
use super::violation::Violation;

/// Most conversions one manifest may declare.
pub const MAX_CONVERSIONS: usize = 16;
/// Most field edits one conversion may carry.
pub const MAX_FIELD_EDITS: usize = 64;
/// Most keys in a field path.
pub const MAX_PATH_DEPTH: usize = 8;
/// The variables an expression may use.
pub const VARIABLES: [&str; 3] = ["self", "name", "labels"];

/// One declared conversion, as stored with the manifest.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SpecConversion {
    /// The version converted from.
    pub from_version: i32,
    /// CEL expression for the whole new spec; empty = a copy of the old.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub spec: String,
    /// Edits applied in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fields: Vec<FieldConversion>,
}

/// One edit of a converted spec.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FieldConversion {
    /// Dot-separated keys into the new spec.
    pub path: String,
    /// CEL expression of the value written at `path` (empty when `remove`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub value: String,
    /// Remove the field instead.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub remove: bool,
}

/// A checked conversion, its expressions compiled.
#[derive(Debug)]
pub struct CompiledConversion {
    spec: Option<Expression>,
    edits: Vec<(Vec<String>, Edit)>,
}

#[derive(Debug)]
enum Edit {
    Set(Expression),
    Remove,
}

/// The compiled conversions of one manifest, by source version.
#[derive(Debug, Default, Clone)]
pub struct Conversions(Arc<HashMap<i32, CompiledConversion>>);

impl Conversions {
    /// The conversion from `version`, if declared.
    pub fn from_version(&self, version: i32) -> Option<&CompiledConversion> {
        self.0.get(&version)
    }

    /// The source versions declared, ascending.
    pub fn versions(&self) -> Vec<i32> {
        let mut versions: Vec<i32> = self.0.keys().copied().collect();
        versions.sort_unstable();
        versions
    }
}

/// Checks and compiles the conversions of the manifest of `own_version`;
/// violations point into `/manifest/conversions`.
pub fn compile(own_version: i32, conversions: &[SpecConversion]) -> Result<Conversions, Vec<Violation>> {
    const AT: &str = "/manifest/conversions";
    let mut out = Vec::new();
    if conversions.len() > MAX_CONVERSIONS {
        out.push(Violation::new(AT, format!("at most {MAX_CONVERSIONS} conversions")));
        return Err(out);
    }
    let mut compiled = HashMap::new();
    let mut seen = HashSet::new();
    for (i, conversion) in conversions.iter().enumerate() {
        let at = format!("{AT}/{i}");
        if conversion.from_version < 1 || conversion.from_version > i32::from(i16::MAX) {
            out.push(Violation::new(
                format!("{at}/from_version"),
                "must be a kind version (>= 1)",
            ));
        } else if conversion.from_version == own_version {
            out.push(Violation::new(
                format!("{at}/from_version"),
                "must name another version than the manifest's own",
            ));
        } else if !seen.insert(conversion.from_version) {
            out.push(Violation::new(
                format!("{at}/from_version"),
                format!("version {} has another conversion", conversion.from_version),
            ));
        }
        let spec = if conversion.spec.is_empty() {
            None
        } else {
            program(&format!("{at}/spec"), &conversion.spec, &mut out)
        };
        if conversion.fields.len() > MAX_FIELD_EDITS {
            out.push(Violation::new(
                format!("{at}/fields"),
                format!("at most {MAX_FIELD_EDITS} edits"),
            ));
            continue;
        }
        let mut edits = Vec::with_capacity(conversion.fields.len());
        for (j, field) in conversion.fields.iter().enumerate() {
            let at = format!("{at}/fields/{j}");
            let path = match parse_path(&field.path) {
                Ok(path) => path,
                Err(why) => {
                    out.push(Violation::new(format!("{at}/path"), why));
                    continue;
                }
            };
            let edit = match (field.remove, field.value.is_empty()) {
                (true, true) => Edit::Remove,
                (true, false) => {
                    out.push(Violation::new(
                        format!("{at}/value"),
                        "must be empty when remove is set",
                    ));
                    continue;
                }
                (false, true) => {
                    out.push(Violation::new(
                        format!("{at}/value"),
                        "is required unless remove is set",
                    ));
                    continue;
                }
                (false, false) => match program(&format!("{at}/value"), &field.value, &mut out) {
                    Some(program) => Edit::Set(program),
                    None => continue,
                },
            };
            edits.push((path, edit));
        }
        compiled.insert(conversion.from_version, CompiledConversion { spec, edits });
    }
    if out.is_empty() {
        Ok(Conversions(Arc::new(compiled)))
    } else {
        Err(out)
    }
}

/// Parses, then checks the variables and loop nesting of one expression.
fn program(at: &str, source: &str, out: &mut Vec<Violation>) -> Option<Expression> {
    Expression::compile(at, source, &VARIABLES, out)
}

fn parse_path(path: &str) -> Result<Vec<String>, String> {
    let keys: Vec<String> = path.split('.').map(str::to_owned).collect();
    if path.is_empty() {
        return Err("is required".into());
    }
    if keys.len() > MAX_PATH_DEPTH {
        return Err(format!("has more than {MAX_PATH_DEPTH} keys"));
    }
    for key in &keys {
        let valid = !key.is_empty()
            && key.len() <= 63
            && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !valid {
            return Err("must be dot-separated keys of 1-63 letters, digits, '_' or '-'".into());
        }
    }
    Ok(keys)
}

/// Why a spec did not convert.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConversionError {
    /// Which expression failed (`spec` or `fields/<i>`).
    pub at: String,
    /// What went wrong, for people (bounded).
    pub message: String,
}

impl std::fmt::Display for ConversionError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.at, self.message)
    }
}

impl CompiledConversion {
    /// Converts `old` (the spec of the resource `name` with `labels`).
    pub fn convert(
        &self,
        old: &Value,
        name: &str,
        labels: &BTreeMap<String, String>,
    ) -> Result<Value, ConversionError> {
        let mut context = expr::context();
        context.add_variable_from_value("self", expr::to_cel(old));
        context.add_variable_from_value("name", name.to_owned());
        context.add_variable_from_value("labels", expr::string_map(labels));
        let budget = Budget::over([old]);

        let mut spec = match &self.spec {
            None => old.clone(),
            Some(program) => evaluate(program, &context, &budget, "spec")?,
        };
        if !spec.is_object() {
            return Err(ConversionError {
                at: "spec".into(),
                message: format!("must yield a map, not {}", kind_of(&spec)),
            });
        }
        for (i, (path, edit)) in self.edits.iter().enumerate() {
            let at = format!("fields/{i}");
            match edit {
                Edit::Remove => remove_at(&mut spec, path),
                Edit::Set(program) => {
                    let value = evaluate(program, &context, &budget, &at)?;
                    set_at(&mut spec, path, value).map_err(|message| ConversionError { at, message })?;
                }
            }
        }
        Ok(spec)
    }
}

fn evaluate(
    program: &Expression,
    context: &Context<'_, '_>,
    budget: &Budget,
    at: &str,
) -> Result<Value, ConversionError> {
    program.evaluate(context, budget).map_err(|message| ConversionError {
        at: at.to_owned(),
        message,
    })
}

/// Writes `value` at `path` (object keys), creating missing objects on the
/// way; also how `converge render` plays a value flow.
pub fn set_at(spec: &mut Value, path: &[String], value: Value) -> Result<(), String> {
    let Some((last, parents)) = path.split_last() else {
        return Err("empty path".into());
    };
    let mut here = spec;
    for key in parents {
        let Value::Object(object) = here else {
            return Err(format!(
                "cannot set {:?}: {key:?} is inside a non-object",
                path.join(".")
            ));
        };
        here = object
            .entry(key.clone())
            .or_insert_with(|| Value::Object(serde_json::Map::new()));
    }
    match here {
        Value::Object(object) => {
            object.insert(last.clone(), value);
            Ok(())
        }
        _ => Err(format!("cannot set {:?}: its parent is not an object", path.join("."))),
    }
}

fn remove_at(spec: &mut Value, path: &[String]) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut here = spec;
    for key in parents {
        match here.get_mut(key) {
            Some(next) => here = next,
            None => return,
        }
    }
    if let Value::Object(object) = here {
        object.remove(last);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn one(spec: &str, fields: Vec<FieldConversion>) -> Conversions {
        compile(
            2,
            &[SpecConversion {
                from_version: 1,
                spec: spec.into(),
                fields,
            }],
        )
        .unwrap()
    }

    fn set(path: &str, value: &str) -> FieldConversion {
        FieldConversion {
            path: path.into(),
            value: value.into(),
            remove: false,
        }
    }

    #[test]
    fn edits_apply_in_order_over_a_copy_of_the_old_spec() {
        let conversions = one(
            "",
            vec![
                set("size", "self.replicas * 2"),
                FieldConversion {
                    path: "replicas".into(),
                    value: String::new(),
                    remove: true,
                },
                set("network.region", "has(self.zone) ? self.zone : 'eu-1'"),
                set("owner", "name + '@' + labels.team"),
            ],
        );
        let labels = BTreeMap::from([("team".to_owned(), "pay".to_owned())]);
        let out = conversions
            .from_version(1)
            .unwrap()
            .convert(&json!({"replicas": 3, "keep": [1.5]}), "a", &labels)
            .unwrap();
        assert_eq!(
            out,
            json!({"size": 6, "keep": [1.5], "network": {"region": "eu-1"}, "owner": "a@pay"})
        );
    }

    #[test]
    fn a_whole_spec_expression_and_runtime_errors() {
        let conversions = one("{'size': self.replicas}", vec![]);
        let conversion = conversions.from_version(1).unwrap();
        let none = BTreeMap::new();
        assert_eq!(
            conversion.convert(&json!({"replicas": 2}), "a", &none).unwrap(),
            json!({"size": 2})
        );
        let error = conversion.convert(&json!({}), "a", &none).unwrap_err();
        assert_eq!(error.at, "spec");
        assert!(error.message.contains("replicas"), "{error}");
        let not_a_map = one("self.replicas", vec![]);
        let error = not_a_map
            .from_version(1)
            .unwrap()
            .convert(&json!({"replicas": 2}), "a", &none)
            .unwrap_err();
        assert!(error.message.contains("must yield a map"), "{error}");
    }

    #[test]
    fn bad_declarations_are_refused_with_paths() {
        let bad = [
            SpecConversion {
                from_version: 2,
                spec: String::new(),
                fields: vec![],
            },
            SpecConversion {
                from_version: 1,
                spec: "self.a +".into(),
                fields: vec![set("a..b", "1"), set("c", "other.x")],
            },
            SpecConversion {
                from_version: 3,
                spec: "self.a.map(x, self.a.map(y, self.a.map(z, z)))".into(),
                fields: vec![],
            },
        ];
        let violations = compile(2, &bad).unwrap_err();
        let fields: Vec<&str> = violations.iter().map(|v| v.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "/manifest/conversions/0/from_version",
                "/manifest/conversions/1/spec",
                "/manifest/conversions/1/fields/0/path",
                "/manifest/conversions/1/fields/1/value",
                "/manifest/conversions/2/spec",
            ],
            "{violations:?}"
        );
        // Loop variables are bound inside their loop only.
        assert!(
            compile(
                2,
                &[SpecConversion {
                    from_version: 1,
                    spec: "{'a': self.l.map(x, x + 1)}".into(),
                    fields: vec![]
                }]
            )
            .is_ok()
        );
    }
}

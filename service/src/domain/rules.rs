//! Validation rules in a schema (ADR 49): CEL expressions a document must
//! satisfy beyond what JSON Schema can say, in the keyword
//! `x-converge-validations` of the schema's root or of any object reached
//! through `properties` (the shape of Kubernetes' `x-kubernetes-validations`).
//!
//! Each rule is `{rule, message?, fieldPath?}`. In the rule, `self` is the
//! value where the rule sits. A rule that uses `oldSelf` is a transition
//! rule: it is judged only on an update, when the value existed before too,
//! with `oldSelf` the stored value (immutability is `self == oldSelf`). A
//! rule is skipped where its value is absent. A rule yields a bool; false,
//! or an evaluation error, refuses the document with the rule's message at
//! the rule's location (plus `fieldPath`).

use serde_json::Value;

use super::cel::{self as expr, Budget, Expression};
use super::violation::{Violation, pointer_token};

/// The schema keyword that holds the rules.
pub const KEYWORD: &str = "x-converge-validations";
/// Most rules one schema may hold.
pub const MAX_RULES: usize = 64;
/// Longest rule message, in bytes.
const MAX_MESSAGE_BYTES: usize = 512;
/// Deepest `properties` nesting searched for rules.
const MAX_DEPTH: usize = 16;

/// The compiled rules of one schema.
#[derive(Debug, Default)]
pub struct Rules {
    rules: Vec<Rule>,
}

#[derive(Debug)]
struct Rule {
    /// Property keys from the document's root to the rule's value.
    location: Vec<String>,
    expression: Expression,
    message: String,
    /// Suffix pointer of a violation below the rule's value.
    field_path: String,
    transition: bool,
}

impl Rules {
    /// Finds and compiles the rules of `schema` (found at `field`).
    pub fn compile(field: &str, schema: &Value) -> Result<Self, Vec<Violation>> {
        let mut out = Vec::new();
        let mut rules = Vec::new();
        collect(field, schema, &mut Vec::new(), &mut rules, &mut out, 0);
        if rules.len() > MAX_RULES {
            out.push(Violation::new(field, format!("at most {MAX_RULES} validation rules")));
        }
        if out.is_empty() { Ok(Self { rules }) } else { Err(out) }
    }

    /// Whether the schema has no rule.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// Whether some rule is a transition rule.
    pub fn has_transitions(&self) -> bool {
        self.rules.iter().any(|r| r.transition)
    }

    /// Judges `document` (at `field`) by the rules that need no old value.
    pub fn check(&self, field: &str, document: &Value) -> Vec<Violation> {
        let budget = Budget::over([document]);
        self.rules
            .iter()
            .filter(|rule| !rule.transition)
            .filter_map(|rule| rule.judge(field, document, None, &budget))
            .collect()
    }

    /// Judges the transition rules, `old` the stored document.
    pub fn check_transition(&self, field: &str, document: &Value, old: &Value) -> Vec<Violation> {
        let budget = Budget::over([document, old]);
        self.rules
            .iter()
            .filter(|rule| rule.transition)
            .filter_map(|rule| rule.judge(field, document, Some(old), &budget))
            .collect()
    }
}

impl Rule {
    fn judge(&self, field: &str, document: &Value, old: Option<&Value>, budget: &Budget) -> Option<Violation> {
        let value = at(document, &self.location)?;
        let mut context = expr::context();
        context.add_variable_from_value("self", expr::to_cel(value));
        if self.transition {
            let before = at(old?, &self.location)?;
            context.add_variable_from_value("oldSelf", expr::to_cel(before));
        }
        let pointer: String = self.location.iter().map(|k| format!("/{}", pointer_token(k))).collect();
        let location = format!("{field}{pointer}{}", self.field_path);
        match self.expression.evaluate_bool(&context, budget) {
            Ok(true) => None,
            Ok(false) => Some(Violation::new(location, self.message.clone())),
            Err(why) => Some(Violation::new(
                location,
                format!("{} (the rule could not be evaluated: {why})", self.message),
            )),
        }
    }
}

fn at<'a>(document: &'a Value, location: &[String]) -> Option<&'a Value> {
    let mut here = document;
    for key in location {
        here = here.get(key)?;
    }
    Some(here)
}

fn collect(
    field: &str,
    schema: &Value,
    location: &mut Vec<String>,
    rules: &mut Vec<Rule>,
    out: &mut Vec<Violation>,
    depth: usize,
) {
    if depth > MAX_DEPTH {
        return;
    }
    let here: String = location
        .iter()
        .map(|k| format!("/properties/{}", pointer_token(k)))
        .collect();
    if let Some(declared) = schema.get(KEYWORD) {
        let at = format!("{field}{here}/{KEYWORD}");
        match declared.as_array() {
            None => out.push(Violation::new(at, "must be a list of rules")),
            Some(list) => {
                for (i, item) in list.iter().enumerate() {
                    let at = format!("{at}/{i}");
                    compile_rule(&at, item, location, rules, out);
                }
            }
        }
    }
    if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
        for (key, sub) in properties {
            location.push(key.clone());
            collect(field, sub, location, rules, out, depth + 1);
            location.pop();
        }
    }
}

fn compile_rule(at: &str, item: &Value, location: &[String], rules: &mut Vec<Rule>, out: &mut Vec<Violation>) {
    let Some(object) = item.as_object() else {
        out.push(Violation::new(
            at,
            "a rule must be an object {rule, message, fieldPath}",
        ));
        return;
    };
    if let Some(unknown) = object
        .keys()
        .find(|k| !["rule", "message", "fieldPath"].contains(&k.as_str()))
    {
        out.push(Violation::new(
            format!("{at}/{}", pointer_token(unknown)),
            "unknown member; a rule has rule, message and fieldPath",
        ));
        return;
    }
    let Some(source) = object.get("rule").and_then(Value::as_str) else {
        out.push(Violation::new(format!("{at}/rule"), "is required (a CEL expression)"));
        return;
    };
    let message = match object.get("message") {
        None => format!("failed rule: {}", expr::clip(source)),
        Some(Value::String(m)) if !m.is_empty() && m.len() <= MAX_MESSAGE_BYTES => m.clone(),
        Some(_) => {
            out.push(Violation::new(
                format!("{at}/message"),
                format!("must be a non-empty string of at most {MAX_MESSAGE_BYTES} bytes"),
            ));
            return;
        }
    };
    let field_path = match object.get("fieldPath") {
        None => String::new(),
        Some(Value::String(p)) if p.is_empty() || (p.starts_with('/') && p.len() <= 256) => p.clone(),
        Some(_) => {
            out.push(Violation::new(
                format!("{at}/fieldPath"),
                "must be a JSON pointer below the rule's value, e.g. /min",
            ));
            return;
        }
    };
    let Some(expression) = Expression::compile(&format!("{at}/rule"), source, &["self", "oldSelf"], out) else {
        return;
    };
    let transition = expression.paths().iter().any(|p| p[0] == "oldSelf");
    rules.push(Rule {
        location: location.to_vec(),
        expression,
        message,
        field_path,
        transition,
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rules() -> Rules {
        Rules::compile(
            "/manifest/spec_schema",
            &json!({
                "type": "object",
                "x-converge-validations": [
                    {"rule": "!has(self.min) || !has(self.max) || self.min <= self.max",
                     "message": "min must not exceed max", "fieldPath": "/min"}
                ],
                "properties": {
                    "region": {"type": "string", "x-converge-validations": [
                        {"rule": "self == oldSelf", "message": "region is immutable"}]},
                    "size": {"type": "integer", "x-converge-validations": [
                        {"rule": "self >= oldSelf", "message": "size may only grow"}]},
                    "min": {"type": "integer"}, "max": {"type": "integer"}
                }
            }),
        )
        .unwrap()
    }

    #[test]
    fn cross_field_rules_judge_every_document() {
        let rules = rules();
        assert!(rules.check("/spec", &json!({"min": 1, "max": 2})).is_empty());
        let refused = rules.check("/spec", &json!({"min": 3, "max": 2}));
        assert_eq!(refused.len(), 1);
        assert_eq!(refused[0].field, "/spec/min");
        assert_eq!(refused[0].description, "min must not exceed max");
    }

    #[test]
    fn transition_rules_judge_updates_only() {
        let rules = rules();
        assert!(rules.has_transitions());
        let old = json!({"region": "eu", "size": 3});
        assert!(rules.check("/spec", &json!({"region": "us", "size": 1})).is_empty());
        let refused = rules.check_transition("/spec", &json!({"region": "us", "size": 1}), &old);
        let fields: Vec<(&str, &str)> = refused
            .iter()
            .map(|v| (v.field.as_str(), v.description.as_str()))
            .collect();
        assert_eq!(
            fields,
            [
                ("/spec/region", "region is immutable"),
                ("/spec/size", "size may only grow")
            ]
        );
        // A field absent before (or now) is not judged.
        assert!(
            rules
                .check_transition("/spec", &json!({"region": "us"}), &json!({}))
                .is_empty()
        );
    }

    #[test]
    fn bad_rules_are_refused_at_their_location() {
        let violations = Rules::compile(
            "/manifest/spec_schema",
            &json!({"properties": {"a": {"x-converge-validations": [
                {"rule": "self +"}, {"message": "m"}, {"rule": "other == 1"}, {"rule": "true", "extra": 1}]}}}),
        )
        .unwrap_err();
        let fields: Vec<&str> = violations.iter().map(|v| v.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "/manifest/spec_schema/properties/a/x-converge-validations/0/rule",
                "/manifest/spec_schema/properties/a/x-converge-validations/1/rule",
                "/manifest/spec_schema/properties/a/x-converge-validations/2/rule",
                "/manifest/spec_schema/properties/a/x-converge-validations/3/extra",
            ]
        );
    }
}

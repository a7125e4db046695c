//! What every CEL expression of a manifest shares (ADR 48, ADR 49): how it
//! is checked when the manifest is applied, how JSON crosses into CEL and
//! back, the `${…}` templates of compositions, and the evaluation budget.
//!
//! The interpreter (`cel`, cel-rust) has no clock, no randomness and no I/O;
//! every loop is a macro over a finite list. What bounds the work of one
//! evaluation is the expression's size, the nesting of its loop macros and
//! the size of the collections it loops over: [`Budget`] estimates that
//! product from the actual inputs before anything runs and refuses an
//! evaluation that would exceed it, so a hostile manifest cannot stall the
//! process that evaluates it.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, LazyLock};

use cel::common::ast::{EntryExpr, Expr, IdedExpr};
use cel::objects::{Key, Map};
use cel::{Context, Env, Program};
use serde_json::Value;

use super::violation::Violation;

/// Longest expression, in bytes.
pub const MAX_EXPRESSION_BYTES: usize = 4096;
/// Deepest nesting of comprehension macros (`map`, `filter`, `all`, ...).
pub const MAX_LOOP_NESTING: usize = 2;
/// Most work units one evaluation may be estimated at (see [`Budget`]).
pub const MAX_COST: u64 = 20_000_000;
/// The namespaces of extension functions (`math.greatest`, `lists.range`).
const NAMESPACES: [&str; 3] = ["math", "lists", "strings"];
/// Longest message of a failed evaluation, in bytes.
const MAX_ERROR_BYTES: usize = 512;

/// The standard library with the strings, lists and math extensions
/// (`join`, `split`, `lowerAscii`, `sort`, `flatten`, `math.greatest`, ...),
/// built once and shared by every evaluation. Registering them can only
/// fail on a name declared twice, which a test of this module would show.
static STDLIB: LazyLock<Arc<Env>> = LazyLock::new(|| {
    let mut env = Env::stdlib();
    for extension in [
        cel::extensions::strings as fn(&mut Env) -> Result<(), _>,
        cel::extensions::lists,
        cel::extensions::math,
    ] {
        if let Err(e) = extension(&mut env) {
            tracing::error!(error = ?e, "a CEL extension did not register");
        }
    }
    Arc::new(env)
});

/// A fresh root context over the shared standard library.
pub fn context<'a>() -> Context<'a, 'a> {
    Context::with_env(STDLIB.clone())
}

/// A checked, compiled expression and what a walk of it found.
#[derive(Debug)]
pub struct Expression {
    program: Program,
    /// Nodes of the syntax tree.
    nodes: u64,
    /// Deepest nesting of loop macros.
    nesting: usize,
    /// Selection chains rooted at a free variable (`spec.a.b` → `["spec",
    /// "a", "b"]`), outside loops' own variables.
    paths: Vec<Vec<String>>,
    /// Whether the whole expression is one such chain.
    whole_path: bool,
}

impl Expression {
    /// Parses `source` and checks its size, loop nesting and free variables
    /// (only `variables`); records each problem at `at` and returns `None`.
    pub fn compile(at: &str, source: &str, variables: &[&str], out: &mut Vec<Violation>) -> Option<Self> {
        if source.trim().is_empty() {
            out.push(Violation::new(at, "is required"));
            return None;
        }
        if source.len() > MAX_EXPRESSION_BYTES {
            out.push(Violation::new(
                at,
                format!("must be at most {MAX_EXPRESSION_BYTES} bytes"),
            ));
            return None;
        }
        let program = match STDLIB.compile(source) {
            Ok(program) => program,
            Err(e) => {
                out.push(Violation::new(
                    at,
                    format!("does not parse as CEL: {}", clip(&e.to_string())),
                ));
                return None;
            }
        };
        let mut scan = Scan::default();
        scan.walk(program.expression(), &mut Vec::new(), 0);
        if scan.nesting > MAX_LOOP_NESTING {
            out.push(Violation::new(
                at,
                format!("nests {} loop macros; at most {MAX_LOOP_NESTING}", scan.nesting),
            ));
            return None;
        }
        if let Some(unknown) = scan.idents.iter().find(|name| !variables.contains(&name.as_str())) {
            out.push(Violation::new(
                at,
                format!(
                    "uses the unknown variable {unknown:?}; the variables here are {}",
                    variables.join(", ")
                ),
            ));
            return None;
        }
        let whole_path = matches!(path_of(program.expression()), Some(p) if p.len() > 1);
        Some(Self {
            program,
            nodes: scan.nodes,
            nesting: scan.nesting,
            paths: scan.paths,
            whole_path,
        })
    }

    /// The selection chains rooted at a variable.
    pub fn paths(&self) -> &[Vec<String>] {
        &self.paths
    }

    /// The whole expression as one selection chain (`vpc.status.vpcId`),
    /// if it is one.
    pub fn as_path(&self) -> Option<Vec<String>> {
        if self.whole_path {
            path_of(self.program.expression())
        } else {
            None
        }
    }

    /// Evaluates in `context`, within `budget`; the result as JSON.
    pub fn evaluate(&self, context: &Context<'_, '_>, budget: &Budget) -> Result<Value, String> {
        budget.admit(self)?;
        let value = self.program.execute(context).map_err(|e| clip(&e.to_string()))?;
        from_cel(&value)
    }

    /// Evaluates to a bool.
    pub fn evaluate_bool(&self, context: &Context<'_, '_>, budget: &Budget) -> Result<bool, String> {
        match self.evaluate(context, budget)? {
            Value::Bool(b) => Ok(b),
            other => Err(format!("must yield a bool, not {}", kind_of(&other))),
        }
    }
}

/// What an evaluation may cost: the product of an expression's size and the
/// largest collection of its inputs raised to its loop nesting, which bounds
/// the steps of any expression within [`MAX_LOOP_NESTING`] over those inputs.
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    /// The longest list or map (or string, in characters / 64) anywhere in
    /// the inputs, at least 1.
    widest: u64,
}

impl Budget {
    /// The budget of evaluations over `inputs`.
    pub fn over<'a>(inputs: impl IntoIterator<Item = &'a Value>) -> Self {
        let mut widest = 1;
        for input in inputs {
            widest = widest.max(widest_in(input));
        }
        Self { widest }
    }

    /// Widens the budget's input by a collection of `len` items made by the
    /// evaluator itself (the children a rollup sees, say).
    pub fn with_collection(self, len: usize) -> Self {
        Self {
            widest: self.widest.max(u64::try_from(len).unwrap_or(u64::MAX)),
        }
    }

    fn admit(&self, expression: &Expression) -> Result<(), String> {
        let nesting = u32::try_from(expression.nesting).unwrap_or(u32::MAX);
        let cost = expression
            .nodes
            .saturating_mul(self.widest.saturating_pow(nesting.max(1)));
        if cost > MAX_COST {
            return Err(format!(
                "the evaluation budget would be exceeded ({} nodes over collections of {} items nested {} deep; at most {MAX_COST} units)",
                expression.nodes, self.widest, expression.nesting
            ));
        }
        Ok(())
    }
}

fn widest_in(value: &Value) -> u64 {
    match value {
        Value::Array(items) => items.iter().map(widest_in).fold(items.len() as u64, u64::max),
        Value::Object(object) => object.values().map(widest_in).fold(object.len() as u64, u64::max),
        Value::String(s) => (s.len() as u64) / 64,
        _ => 1,
    }
}

/// What a walk of an expression found.
#[derive(Default)]
struct Scan {
    nodes: u64,
    nesting: usize,
    idents: BTreeSet<String>,
    paths: Vec<Vec<String>>,
}

impl Scan {
    fn walk(&mut self, e: &IdedExpr, bound: &mut Vec<String>, depth: usize) {
        self.nodes += 1;
        match &e.expr {
            Expr::Ident(name) => {
                if !bound.iter().any(|b| b == name) {
                    self.idents.insert(name.clone());
                    self.paths.push(vec![name.clone()]);
                }
            }
            Expr::Call(call) => {
                // `math.greatest(…)`: a function's namespace, not a variable.
                let namespaced = call
                    .target
                    .as_ref()
                    .is_some_and(|t| matches!(&t.expr, Expr::Ident(n) if NAMESPACES.contains(&n.as_str())));
                if let Some(target) = call.target.as_ref().filter(|_| !namespaced) {
                    self.walk(target, bound, depth);
                }
                for arg in &call.args {
                    self.walk(arg, bound, depth);
                }
            }
            Expr::Select(select) => match path_of(e) {
                Some(path) if !bound.iter().any(|b| *b == path[0]) => {
                    self.nodes += path.len() as u64;
                    self.idents.insert(path[0].clone());
                    self.paths.push(path);
                }
                _ => self.walk(&select.operand, bound, depth),
            },
            Expr::List(list) => {
                for element in &list.elements {
                    self.walk(element, bound, depth);
                }
            }
            Expr::Map(map) => {
                for entry in &map.entries {
                    if let EntryExpr::MapEntry(entry) = &entry.expr {
                        self.walk(&entry.key, bound, depth);
                        self.walk(&entry.value, bound, depth);
                    }
                }
            }
            Expr::Struct(s) => {
                for entry in &s.entries {
                    if let EntryExpr::StructField(field) = &entry.expr {
                        self.walk(&field.value, bound, depth);
                    }
                }
            }
            Expr::Comprehension(c) => {
                self.walk(&c.iter_range, bound, depth);
                self.walk(&c.accu_init, bound, depth);
                let inner = depth + 1;
                self.nesting = self.nesting.max(inner);
                let before = bound.len();
                bound.push(c.iter_var.clone());
                bound.extend(c.iter_var2.clone());
                bound.push(c.accu_var.clone());
                self.walk(&c.loop_cond, bound, inner);
                self.walk(&c.loop_step, bound, inner);
                self.walk(&c.result, bound, inner);
                bound.truncate(before);
            }
            Expr::Literal(_) | Expr::Unspecified => {}
        }
    }
}

/// `a.b.c` as `["a", "b", "c"]` when `e` is such a chain (field tests like
/// `has(a.b)` are not).
fn path_of(e: &IdedExpr) -> Option<Vec<String>> {
    match &e.expr {
        Expr::Ident(name) => Some(vec![name.clone()]),
        Expr::Select(select) if !select.test => {
            let mut path = path_of(&select.operand)?;
            path.push(select.field.clone());
            Some(path)
        }
        _ => None,
    }
}

/// A JSON value whose strings may hold `${expression}`s: a string that is
/// exactly one `${…}` takes the expression's value (of any type); other
/// strings interpolate each `${…}` as text.
#[derive(Debug)]
pub enum Template {
    /// A value with no expression.
    Literal(Value),
    /// A string that is one expression.
    Whole(Expression),
    /// A string with text around expressions.
    Text(Vec<Piece>),
    /// A list of templates.
    List(Vec<Template>),
    /// A map of templates.
    Map(Vec<(String, Template)>),
}

/// A part of an interpolated string.
#[derive(Debug)]
pub enum Piece {
    /// Literal text.
    Text(String),
    /// An expression, shown as text.
    Expression(Expression),
}

impl Template {
    /// Compiles `value` (at pointer `at`); expressions may use `variables`.
    pub fn compile(at: &str, value: &Value, variables: &[&str], out: &mut Vec<Violation>) -> Self {
        match value {
            Value::String(s) => Self::compile_text(at, s, variables, out),
            Value::Array(items) => Self::List(
                items
                    .iter()
                    .enumerate()
                    .map(|(i, item)| Self::compile(&format!("{at}/{i}"), item, variables, out))
                    .collect(),
            ),
            Value::Object(object) => Self::Map(
                object
                    .iter()
                    .map(|(k, v)| {
                        let key = super::violation::pointer_token(k);
                        (k.clone(), Self::compile(&format!("{at}/{key}"), v, variables, out))
                    })
                    .collect(),
            ),
            other => Self::Literal(other.clone()),
        }
    }

    /// Compiles one string.
    pub fn compile_text(at: &str, text: &str, variables: &[&str], out: &mut Vec<Violation>) -> Self {
        let pieces = match split(text) {
            Ok(pieces) => pieces,
            Err(why) => {
                out.push(Violation::new(at, why));
                return Self::Literal(Value::Null);
            }
        };
        match pieces.as_slice() {
            [] => Self::Literal(Value::String(String::new())),
            [Split::Text(t)] => Self::Literal(Value::String(t.clone())),
            [Split::Expression(source)] => match Expression::compile(at, source, variables, out) {
                Some(e) => Self::Whole(e),
                None => Self::Literal(Value::Null),
            },
            _ => Self::Text(
                pieces
                    .into_iter()
                    .filter_map(|piece| match piece {
                        Split::Text(t) => Some(Piece::Text(t)),
                        Split::Expression(source) => {
                            Expression::compile(at, &source, variables, out).map(Piece::Expression)
                        }
                    })
                    .collect(),
            ),
        }
    }

    /// Every expression of the template with the pointer it sits at and
    /// whether it is a whole string (so may yield any type).
    pub fn expressions<'a>(&'a self, at: &str, found: &mut Vec<(String, &'a Expression, bool)>) {
        match self {
            Self::Literal(_) => {}
            Self::Whole(e) => found.push((at.to_owned(), e, true)),
            Self::Text(pieces) => {
                for piece in pieces {
                    if let Piece::Expression(e) = piece {
                        found.push((at.to_owned(), e, false));
                    }
                }
            }
            Self::List(items) => {
                for (i, item) in items.iter().enumerate() {
                    item.expressions(&format!("{at}/{i}"), found);
                }
            }
            Self::Map(entries) => {
                for (key, value) in entries {
                    value.expressions(&format!("{at}/{}", super::violation::pointer_token(key)), found);
                }
            }
        }
    }

    /// The template's value in `context`. `skip` names the pointers left
    /// out (fields a value flow fills later).
    pub fn render(
        &self,
        at: &str,
        context: &Context<'_, '_>,
        budget: &Budget,
        skip: &dyn Fn(&str) -> bool,
    ) -> Result<Value, String> {
        Ok(match self {
            Self::Literal(v) => v.clone(),
            Self::Whole(e) => e.evaluate(context, budget).map_err(|m| format!("{at}: {m}"))?,
            Self::Text(pieces) => {
                let mut text = String::new();
                for piece in pieces {
                    match piece {
                        Piece::Text(t) => text.push_str(t),
                        Piece::Expression(e) => match e.evaluate(context, budget).map_err(|m| format!("{at}: {m}"))? {
                            Value::String(s) => text.push_str(&s),
                            Value::Null => {}
                            other => text.push_str(&other.to_string()),
                        },
                    }
                }
                Value::String(text)
            }
            Self::List(items) => Value::Array(
                items
                    .iter()
                    .enumerate()
                    .map(|(i, item)| item.render(&format!("{at}/{i}"), context, budget, skip))
                    .collect::<Result<_, _>>()?,
            ),
            Self::Map(entries) => {
                let mut object = serde_json::Map::new();
                for (key, value) in entries {
                    let here = format!("{at}/{}", super::violation::pointer_token(key));
                    if skip(&here) {
                        continue;
                    }
                    object.insert(key.clone(), value.render(&here, context, budget, skip)?);
                }
                Value::Object(object)
            }
        })
    }
}

enum Split {
    Text(String),
    Expression(String),
}

/// Splits `text` at its `${…}`s (braces inside an expression nest; `$${`
/// is a literal `${`).
fn split(text: &str) -> Result<Vec<Split>, String> {
    let mut out = Vec::new();
    let mut literal = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        if rest[..start].ends_with('$') {
            literal.push_str(&rest[..start - 1]);
            literal.push_str("${");
            rest = &rest[start + 2..];
            continue;
        }
        literal.push_str(&rest[..start]);
        let body = &rest[start + 2..];
        let mut depth = 1usize;
        let mut end = None;
        let mut quote: Option<char> = None;
        let mut escaped = false;
        for (i, c) in body.char_indices() {
            if let Some(q) = quote {
                if escaped {
                    escaped = false;
                } else if c == '\\' {
                    escaped = true;
                } else if c == q {
                    quote = None;
                }
                continue;
            }
            match c {
                '\'' | '"' => quote = Some(c),
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = Some(i);
                        break;
                    }
                }
                _ => {}
            }
        }
        let Some(end) = end else {
            return Err("has a ${ without its closing }".into());
        };
        if !literal.is_empty() {
            out.push(Split::Text(std::mem::take(&mut literal)));
        }
        out.push(Split::Expression(body[..end].to_owned()));
        rest = &body[end + 1..];
    }
    literal.push_str(rest);
    if !literal.is_empty() {
        out.push(Split::Text(literal));
    }
    Ok(out)
}

/// JSON to CEL: integral numbers become ints (so `spec.replicas * 2` works
/// as a person reads it), others doubles.
pub fn to_cel(value: &Value) -> cel::Value {
    match value {
        Value::Null => cel::Value::Null,
        Value::Bool(b) => cel::Value::Bool(*b),
        Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => cel::Value::Int(i),
            (None, Some(u), _) => cel::Value::UInt(u),
            (_, _, Some(f)) if f.fract() == 0.0 && f.abs() < 9.0e15 => cel::Value::Int(f as i64),
            (_, _, f) => cel::Value::Float(f.unwrap_or(0.0)),
        },
        Value::String(s) => cel::Value::String(Arc::new(s.clone())),
        Value::Array(items) => cel::Value::List(Arc::new(items.iter().map(to_cel).collect())),
        Value::Object(object) => {
            let map: HashMap<Key, cel::Value> = object.iter().map(|(k, v)| (Key::from(k.clone()), to_cel(v))).collect();
            cel::Value::Map(Map { map: Arc::new(map) })
        }
    }
}

/// A CEL map of strings.
pub fn string_map<'a>(entries: impl IntoIterator<Item = (&'a String, &'a String)>) -> cel::Value {
    let map: HashMap<Key, cel::Value> = entries
        .into_iter()
        .map(|(k, v)| (Key::from(k.clone()), cel::Value::from(v.clone())))
        .collect();
    cel::Value::Map(Map { map: Arc::new(map) })
}

/// CEL to JSON: only what a document can hold.
pub fn from_cel(value: &cel::Value) -> Result<Value, String> {
    Ok(match value {
        cel::Value::Null => Value::Null,
        cel::Value::Bool(b) => Value::Bool(*b),
        cel::Value::Int(i) => Value::from(*i),
        cel::Value::UInt(u) => Value::from(*u),
        cel::Value::Float(f) => serde_json::Number::from_f64(*f)
            .map(Value::Number)
            .ok_or_else(|| format!("yields {f}, which JSON cannot hold"))?,
        cel::Value::String(s) => Value::String(s.as_ref().clone()),
        cel::Value::List(items) => Value::Array(items.iter().map(from_cel).collect::<Result<_, _>>()?),
        cel::Value::Map(map) => {
            let mut object = serde_json::Map::new();
            for (key, value) in map.map.iter() {
                let Key::String(key) = key else {
                    return Err("yields a map with a non-string key".into());
                };
                object.insert(key.as_ref().clone(), from_cel(value)?);
            }
            Value::Object(object)
        }
        other => return Err(format!("yields a {}, which a document cannot hold", other.type_of())),
    })
}

/// What kind of JSON value `value` is, for messages.
pub fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a bool",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a map",
    }
}

/// The first line of an interpreter's message, bounded.
pub fn clip(text: &str) -> String {
    super::violation::clip(text.lines().next().unwrap_or_default().to_owned(), MAX_ERROR_BYTES)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn compiled(source: &str, variables: &[&str]) -> Expression {
        let mut out = Vec::new();
        Expression::compile("/x", source, variables, &mut out).unwrap_or_else(|| panic!("{out:?}"))
    }

    #[test]
    fn templates_take_whole_values_and_interpolate_text() {
        let mut out = Vec::new();
        let template = Template::compile(
            "/spec",
            &json!({"n": "${spec.n * 2}", "name": "${name}-x-${spec.n}", "lit": "$${kept}", "l": [1, "${true}"]}),
            &["spec", "name"],
            &mut out,
        );
        assert!(out.is_empty(), "{out:?}");
        let mut context = context();
        context.add_variable_from_value("spec", to_cel(&json!({"n": 3})));
        context.add_variable_from_value("name", "a".to_owned());
        let budget = Budget::over([&json!({"n": 3})]);
        let value = template.render("/spec", &context, &budget, &|_| false).unwrap();
        assert_eq!(
            value,
            json!({"n": 6, "name": "a-x-3", "lit": "${kept}", "l": [1, true]})
        );
        let skipped = template
            .render("/spec", &context, &budget, &|at| at == "/spec/n")
            .unwrap();
        assert!(skipped.get("n").is_none());
    }

    #[test]
    fn paths_and_unknown_variables() {
        let e = compiled("vpc.status.vpcId", &["vpc"]);
        assert_eq!(e.as_path(), Some(vec!["vpc".into(), "status".into(), "vpcId".into()]));
        let e = compiled("spec.items.map(x, x.size) + [spec.extra]", &["spec"]);
        assert_eq!(e.as_path(), None);
        let paths: Vec<String> = e.paths().iter().map(|p| p.join(".")).collect();
        assert_eq!(paths, ["spec.items", "spec.extra"]);
        let mut out = Vec::new();
        assert!(Expression::compile("/x", "other + 1", &["spec"], &mut out).is_none());
        assert!(out[0].description.contains("unknown variable \"other\""), "{out:?}");
        assert!(Expression::compile("/x", "'${'", &["spec"], &mut out).is_some());
        let mut out = Vec::new();
        let _ = Template::compile_text("/x", "${spec", &["spec"], &mut out);
        assert!(out[0].description.contains("closing"), "{out:?}");
    }

    #[test]
    fn the_extensions_are_there() {
        let e = compiled(
            "[spec.a.join('-'), 'A,b'.split(',')[0].lowerAscii(), string(math.greatest([1, 3])), string(size([3, 1].sort()))]",
            &["spec"],
        );
        let mut context = context();
        context.add_variable_from_value("spec", to_cel(&json!({"a": ["x", "y"]})));
        assert_eq!(
            e.evaluate(&context, &Budget::over([])).unwrap(),
            json!(["x-y", "a", "3", "2"])
        );
    }

    #[test]
    fn the_budget_refuses_wide_nested_loops_before_running_them() {
        let e = compiled("spec.l.map(x, spec.l.map(y, x + y)).size()", &["spec"]);
        let small = json!({"l": (0..10).collect::<Vec<i32>>()});
        let mut context = context();
        context.add_variable_from_value("spec", to_cel(&small));
        assert_eq!(e.evaluate(&context, &Budget::over([&small])).unwrap(), json!(10));
        let wide = json!({"l": (0..5000).collect::<Vec<i32>>()});
        let error = e.evaluate(&context, &Budget::over([&wide])).unwrap_err();
        assert!(error.contains("evaluation budget"), "{error}");
    }
}

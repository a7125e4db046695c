//! YAML output that every reader takes back as the same JSON value.
//!
//! A general YAML serializer quotes what a YAML 1.2 core-schema reader
//! would turn into another type, and prints the rest plain. YAML 1.1
//! readers (PyYAML, the most common Python reader, Ruby's Psych, Go's
//! yaml.v2) resolve more: `no`, `off` and `on` are booleans, `2026-01-01`
//! a date, `1_000` a number, `12:30` a sexagesimal integer, `=` a value
//! key that does not load at all, and `1e5` (with no dot) a string. So
//! this printer inverts the question: a string is printed plain only when
//! it is a shape no schema of either version resolves to anything but a
//! string (it starts with a letter, uses a small set of characters and is
//! no reserved word); every other string is double-quoted, and floats
//! always carry a dot and a signed exponent.

use std::fmt::Write as _;

use serde_json::{Map, Number, Value};

/// Words YAML 1.1 or 1.2 read as a boolean or null, compared ignoring
/// case (1.1's `y` and `n` included: the spec lists them although PyYAML
/// does not resolve them).
const RESERVED: &[&str] = &["y", "n", "yes", "no", "true", "false", "on", "off", "null"];

/// Whether `s` may be printed as a plain scalar (as a value or a key).
fn plain_is_safe(s: &str) -> bool {
    let Some(first) = s.chars().next() else {
        return false;
    };
    first.is_ascii_alphabetic()
        && !s.ends_with(' ')
        && !s.ends_with(':')
        && !s.contains(": ")
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, ' ' | '_' | '-' | '.' | '/' | '@' | '+' | ':'))
        && !RESERVED.iter().any(|r| r.eq_ignore_ascii_case(s))
}

/// `s` as a double-quoted scalar: the escapes both YAML versions read,
/// and `\u` for every character a reader may refuse raw (C0 and C1
/// controls, DEL, the byte-order mark, the Unicode line separators).
fn quoted(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() || matches!(c, '\u{feff}' | '\u{2028}' | '\u{2029}') => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Whether a multi-line string can be a literal block (`|`) that reads
/// back byte for byte: no leading space or newline (which would need an
/// indentation indicator), no line made of blanks only (it would be read
/// as empty), and nothing a block may not hold raw.
fn literal_is_safe(s: &str) -> bool {
    s.contains('\n')
        && !s.starts_with([' ', '\n'])
        && s.lines().all(|l| l.is_empty() || !l.trim().is_empty())
        && !s
            .chars()
            .any(|c| (c.is_control() && c != '\n') || matches!(c, '\u{feff}' | '\u{2028}' | '\u{2029}'))
}

fn scalar_string(s: &str, indent: usize, out: &mut String) {
    if plain_is_safe(s) {
        out.push_str(s);
    } else if literal_is_safe(s) {
        // Chomping: `|-` keeps no final newline, `|` one, `|+` all of them.
        let trailing = s.len() - s.trim_end_matches('\n').len();
        out.push_str(match trailing {
            0 => "|-",
            1 => "|",
            _ => "|+",
        });
        let pad = " ".repeat(indent + 2);
        for line in s.trim_end_matches('\n').split('\n') {
            out.push('\n');
            if !line.is_empty() {
                out.push_str(&pad);
                out.push_str(line);
            }
        }
        for _ in 1..trailing {
            out.push('\n');
        }
    } else {
        quoted(s, out);
    }
}

/// A number as both versions read it: integers as they are; floats with a
/// dot and a signed exponent (`1.0e+300`), which YAML 1.1 requires.
fn number(n: &Number, out: &mut String) {
    let text = n.to_string();
    if n.is_f64() {
        let (mantissa, exponent) = match text.split_once(['e', 'E']) {
            Some((m, e)) => (m, Some(e)),
            None => (text.as_str(), None),
        };
        out.push_str(mantissa);
        if !mantissa.contains('.') {
            out.push_str(".0");
        }
        if let Some(e) = exponent {
            out.push('e');
            if !e.starts_with(['-', '+']) {
                out.push('+');
            }
            out.push_str(e);
        }
    } else {
        out.push_str(&text);
    }
}

/// A scalar, or an empty collection (printed in flow style).
fn inline(value: &Value, indent: usize, out: &mut String) -> bool {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => number(n, out),
        Value::String(s) => scalar_string(s, indent, out),
        Value::Array(a) if a.is_empty() => out.push_str("[]"),
        Value::Object(o) if o.is_empty() => out.push_str("{}"),
        _ => return false,
    }
    true
}

/// The order in which a document's keys are printed.
pub type KeyOrder = fn(&Map<String, Value>) -> Vec<(&String, &Value)>;

/// Writes `value` as a block node whose lines start at `indent`; the
/// caller has written the key or dash in front of the first line. A
/// mapping that is a document (`order` is `Some`) prints its keys in that
/// order, and so do the items of its `items` list (a `List`'s documents);
/// every other mapping in key order.
fn block(value: &Value, indent: usize, order: Option<KeyOrder>, out: &mut String) {
    match value {
        Value::Object(map) if !map.is_empty() => {
            let entries = order.map_or_else(|| map.iter().collect(), |order| order(map));
            for (i, (key, v)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push('\n');
                    out.push_str(&" ".repeat(indent));
                }
                if plain_is_safe(key) {
                    out.push_str(key);
                } else {
                    quoted(key, out);
                }
                out.push(':');
                let documents = order.filter(|_| key == "items" && v.is_array());
                child(v, indent, documents, out);
            }
        }
        Value::Array(items) if !items.is_empty() => {
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push('\n');
                    out.push_str(&" ".repeat(indent));
                }
                out.push_str("- ");
                if !inline(item, indent + 2, out) {
                    block(item, indent + 2, order, out);
                }
            }
        }
        _ => {
            inline(value, indent, out);
        }
    }
}

/// The value of a mapping entry: after `key:` on the same line when
/// inline, else on the following lines (a sequence at the key's indent,
/// as kubectl prints it; a mapping two spaces in).
fn child(value: &Value, indent: usize, order: Option<KeyOrder>, out: &mut String) {
    let mut scalar = String::new();
    if inline(value, indent, &mut scalar) {
        out.push(' ');
        out.push_str(&scalar);
        return;
    }
    let inner = if value.is_array() { indent } else { indent + 2 };
    out.push('\n');
    out.push_str(&" ".repeat(inner));
    block(value, inner, order, out);
}

/// `value` as a YAML document (ending in a newline), mappings in key order.
pub fn to_string(value: &Value) -> String {
    let mut out = String::new();
    block(value, 0, None, &mut out);
    out.push('\n');
    out
}

/// An envelope (or a `List` of them) as a YAML document: the keys of each
/// envelope in `order`, every other mapping in key order.
pub fn document(value: &Value, order: KeyOrder) -> String {
    let mut out = String::new();
    block(value, 0, Some(order), &mut out);
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn strings_other_types_would_claim_are_quoted() {
        for s in [
            "no",
            "Off",
            "ON",
            "yes",
            "y",
            "N",
            "true",
            "null",
            "~",
            "",
            "2026-01-01",
            "1_000",
            "12:30",
            "=",
            "1e5",
            ".inf",
            "0x1f",
            "-",
            "- a",
            "a: b",
            "a #b",
            "@x",
            "!tag",
            "&a",
            "*a",
            "'",
            "\"",
            "%x",
            "<<",
            "[a]",
            "{a}",
            "a,b",
            "|",
            ">",
            "?",
            " a",
            "a ",
            "café",
            "1.5",
        ] {
            assert!(!plain_is_safe(s), "{s:?} printed plain");
            let text = to_string(&json!({ "k": s }));
            assert!(text.starts_with("k: \""), "{s:?}: {text}");
        }
        for s in [
            "hello",
            "Ready",
            "converge.dev/v1",
            "demo-payments",
            "a b",
            "nginx:1.25",
            "e5",
        ] {
            assert_eq!(to_string(&json!({ "k": s })), format!("k: {s}\n"));
        }
    }

    #[test]
    fn floats_carry_a_dot_and_a_signed_exponent() {
        assert_eq!(to_string(&json!(1e300)), "1.0e+300\n");
        assert_eq!(to_string(&json!(2.5e-7)), "2.5e-7\n");
        assert_eq!(to_string(&json!(0.5)), "0.5\n");
        assert_eq!(to_string(&json!(1.0)), "1.0\n");
        assert_eq!(to_string(&json!(-3)), "-3\n");
    }

    #[test]
    fn blocks_nest_as_kubectl_prints_them() {
        let value = json!({
            "spec": {"list": [1, {"a": [], "b": {}}, [true, null]], "m": {"x": "z"}},
            "text": "line one\nline two\n",
            "keep": "a\n\n",
            "chomp": "a\nb",
        });
        assert_eq!(
            to_string(&value),
            "chomp: |-\n  a\n  b\nkeep: |+\n  a\n\nspec:\n  list:\n  - 1\n  - a: []\n    b: {}\n  - - true\n    - null\n  m:\n    x: z\ntext: |\n  line one\n  line two\n"
        );
    }

    #[test]
    fn what_is_printed_reads_back_unchanged() {
        let value = json!({
            "labels": {"public": "off", "release": "2026-01-01", "n": "1_000", "t": "12:30", "12": "x"},
            "spec": {"eq": "=", "tab": "a\tb", "bom": "\u{feff}x", "nl": "  indented\nnext", "blank": "a\n  \nb",
                     "big": 1e300, "list": ["no", 1, 2.5, false, null, {"": ""}], "quote": "say \"hi\" \\ there"},
        });
        let text = to_string(&value);
        let back: Value = serde_norway::from_str(&text).unwrap();
        assert_eq!(back, value, "{text}");
    }
}

//! Kubernetes-style labels: syntax validation of label maps and parsing/matching of label selectors.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use super::names::{check_dns_subdomain, quote};
use super::violation::{Violation, pointer_token};

/// Most labels one object may carry.
pub const MAX_LABELS: usize = 64;

/// Longest label name (the part of a key after any prefix) and longest label value.
pub const MAX_LABEL_NAME_LEN: usize = 63;

/// Longest label selector accepted, in bytes.
pub const MAX_SELECTOR_LEN: usize = 4096;

/// Most requirements one label selector may contain.
pub const MAX_SELECTOR_REQUIREMENTS: usize = 64;

/// Most values one `in`/`notin` set may list.
pub const MAX_SELECTOR_SET_VALUES: usize = 64;

/// Checks every key and value of `labels` against the Kubernetes label syntax, and that there are at most
/// [`MAX_LABELS`] of them.
///
/// A key is an optional prefix (a DNS subdomain of at most 253 characters) and '/', followed by a name of 1-63
/// letters, digits, '-', '_' or '.' that starts and ends with a letter or digit. A value is empty or follows the
/// name rule. Each bad entry yields one violation on `"/labels/<escaped key>"` describing everything wrong with it; a
/// count over the limit yields one on "/labels". At most [`MAX_LABELS`] entry violations are reported.
pub fn validate_labels(labels: &BTreeMap<String, String>) -> Result<(), Vec<Violation>> {
    let mut violations = Vec::new();
    if labels.len() > MAX_LABELS {
        violations.push(Violation::new(
            "/labels",
            format!(
                "too many labels: {} given, at most {MAX_LABELS} are allowed",
                labels.len()
            ),
        ));
    }
    let mut bad_entries = 0;
    for (key, value) in labels {
        // Bounded so a huge map of garbage cannot turn into an equally huge error response.
        if bad_entries == MAX_LABELS {
            break;
        }
        let problems: Vec<String> = [check_label_key(key).err(), check_label_value(value).err()]
            .into_iter()
            .flatten()
            .collect();
        if !problems.is_empty() {
            bad_entries += 1;
            violations.push(Violation::new(
                format!("/labels/{}", pointer_token(key)),
                problems.join("; "),
            ));
        }
    }
    if violations.is_empty() { Ok(()) } else { Err(violations) }
}

/// Checks one label key; the error is a human-readable description.
pub(crate) fn check_label_key(key: &str) -> Result<(), String> {
    if key.is_empty() {
        return Err("label key must not be empty".to_owned());
    }
    let Some((prefix, name)) = key.split_once('/') else {
        return if is_label_name(key) {
            Ok(())
        } else {
            Err(format!(
                "label key {} is invalid: use 1-63 letters, digits, '-', '_' or '.', starting and ending with a letter \
                 or digit, optionally after a DNS-subdomain prefix and '/'",
                quote(key)
            ))
        };
    };
    if name.contains('/') {
        return Err(format!(
            "label key {} is invalid: it may contain only one '/', between the prefix and the name",
            quote(key)
        ));
    }
    if prefix.is_empty() {
        return Err(format!(
            "label key {} is invalid: the prefix before '/' must not be empty",
            quote(key)
        ));
    }
    if check_dns_subdomain(prefix).is_err() {
        return Err(format!(
            "label key {} is invalid: the prefix before '/' must be a DNS subdomain: up to 253 lower-case letters, \
             digits, '-' or '.', with a letter or digit at each end and on both sides of every '.'",
            quote(key)
        ));
    }
    if !is_label_name(name) {
        return Err(format!(
            "label key {} is invalid: the name after '/' must be 1-63 letters, digits, '-', '_' or '.', starting and \
             ending with a letter or digit",
            quote(key)
        ));
    }
    Ok(())
}

/// Checks one label value; the error is a human-readable description.
pub(crate) fn check_label_value(value: &str) -> Result<(), String> {
    if value.is_empty() || is_label_name(value) {
        Ok(())
    } else {
        Err(format!(
            "label value {} is invalid: use at most 63 letters, digits, '-', '_' or '.', starting and ending with a \
             letter or digit, or leave it empty",
            quote(value)
        ))
    }
}

/// The Kubernetes "qualified name" rule shared by key names and non-empty values.
fn is_label_name(s: &str) -> bool {
    let bytes = s.as_bytes();
    let (Some(first), Some(last)) = (bytes.first(), bytes.last()) else {
        return false;
    };
    bytes.len() <= MAX_LABEL_NAME_LEN
        && first.is_ascii_alphanumeric()
        && last.is_ascii_alphanumeric()
        && bytes
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// A parsed label selector with Kubernetes semantics: an object matches when it satisfies every requirement, so a
/// selector without requirements matches everything.
///
/// [`LabelSelector::parse`] returns requirements sorted and de-duplicated (and set values sorted and de-duplicated),
/// so equivalent selectors written differently compare equal and [`Display`](fmt::Display) prints one canonical form.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct LabelSelector {
    /// The requirements, all of which must hold.
    pub requirements: Vec<Requirement>,
}

/// One requirement of a [`LabelSelector`].
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Requirement {
    /// `key=value` or `key==value`: the label is present with exactly this value.
    Equals {
        /// Label key.
        key: String,
        /// Required value (may be empty).
        value: String,
    },
    /// `key!=value`: the label is absent, or present with another value.
    NotEquals {
        /// Label key.
        key: String,
        /// Excluded value (may be empty).
        value: String,
    },
    /// `key in (v1,v2)`: the label is present with one of the values.
    In {
        /// Label key.
        key: String,
        /// Allowed values.
        values: Vec<String>,
    },
    /// `key notin (v1,v2)`: the label is absent, or present with none of the values.
    NotIn {
        /// Label key.
        key: String,
        /// Excluded values.
        values: Vec<String>,
    },
    /// `key`: the label is present, with any value.
    Exists {
        /// Label key.
        key: String,
    },
    /// `!key`: the label is absent.
    NotExists {
        /// Label key.
        key: String,
    },
}

/// Why a label selector could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid label selector at character {position}: {message}")]
pub struct SelectorError {
    /// Zero-based offset, in characters (not bytes), of the problem in the input; equal to the input's length when
    /// the input ended too early.
    pub position: usize,
    /// What is wrong, e.g. "expected ',' or ')' but found end of selector".
    pub message: String,
}

impl Requirement {
    /// The label key this requirement is about.
    pub fn key(&self) -> &str {
        match self {
            Self::Equals { key, .. }
            | Self::NotEquals { key, .. }
            | Self::In { key, .. }
            | Self::NotIn { key, .. }
            | Self::Exists { key }
            | Self::NotExists { key } => key,
        }
    }

    /// Whether an object with these labels satisfies this requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let actual = labels.get(self.key());
        match self {
            Self::Equals { value, .. } => actual == Some(value),
            // Kubernetes semantics: negative requirements also match objects that lack the key.
            Self::NotEquals { value, .. } => actual != Some(value),
            Self::In { values, .. } => actual.is_some_and(|a| values.contains(a)),
            Self::NotIn { values, .. } => actual.is_none_or(|a| !values.contains(a)),
            Self::Exists { .. } => actual.is_some(),
            Self::NotExists { .. } => actual.is_none(),
        }
    }
}

impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Equals { key, value } => write!(f, "{key}={value}"),
            Self::NotEquals { key, value } => write!(f, "{key}!={value}"),
            Self::In { key, values } => write!(f, "{key} in ({})", values.join(",")),
            Self::NotIn { key, values } => write!(f, "{key} notin ({})", values.join(",")),
            Self::Exists { key } => write!(f, "{key}"),
            Self::NotExists { key } => write!(f, "!{key}"),
        }
    }
}

impl LabelSelector {
    /// Parses a Kubernetes-style label selector such as `app=web,tier in (frontend, backend),!canary`.
    ///
    /// Supported requirements, separated by ',': `k=v`, `k==v`, `k!=v` (an omitted value means the empty value),
    /// `k in (v1,v2)`, `k notin (v1,v2)`, `k` and `!k`. Whitespace around tokens is ignored and an empty (or blank)
    /// input has no requirements. Keys and values must follow the label syntax; sets need at least one non-empty
    /// value. The input is bounded to [`MAX_SELECTOR_LEN`] bytes, [`MAX_SELECTOR_REQUIREMENTS`] requirements and
    /// [`MAX_SELECTOR_SET_VALUES`] values per set.
    pub fn parse(input: &str) -> Result<LabelSelector, SelectorError> {
        let mut parser = Parser { input, pos: 0 };
        if input.len() > MAX_SELECTOR_LEN {
            return Err(parser.error(
                MAX_SELECTOR_LEN,
                format!(
                    "selector is {} bytes long; at most {MAX_SELECTOR_LEN} are allowed",
                    input.len()
                ),
            ));
        }
        let mut requirements = Vec::new();
        parser.skip_whitespace();
        if parser.peek().is_none() {
            return Ok(LabelSelector::default());
        }
        loop {
            parser.skip_whitespace();
            if requirements.len() == MAX_SELECTOR_REQUIREMENTS {
                return Err(parser.error(
                    parser.pos,
                    format!("too many requirements; at most {MAX_SELECTOR_REQUIREMENTS} are allowed"),
                ));
            }
            requirements.push(parser.requirement()?);
            parser.skip_whitespace();
            if parser.peek().is_none() {
                break;
            }
            if !parser.eat(',') {
                return Err(parser.error(
                    parser.pos,
                    format!("expected ',' or end of selector but found {}", parser.found()),
                ));
            }
        }
        // Canonical order: AND is commutative, so sorting changes no meaning but makes equal selectors compare equal.
        requirements.sort_by(|a, b| a.key().cmp(b.key()).then_with(|| a.cmp(b)));
        requirements.dedup();
        Ok(LabelSelector { requirements })
    }

    /// Whether an object with these labels matches, i.e. satisfies every requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.requirements.iter().all(|r| r.matches(labels))
    }

    /// Whether the selector has no requirements and therefore matches everything.
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }
}

impl FromStr for LabelSelector {
    type Err = SelectorError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl fmt::Display for LabelSelector {
    /// Prints the canonical form, e.g. `app=web,tier in (a,b),!canary`, which parses back to an equal selector.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, requirement) in self.requirements.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{requirement}")?;
        }
        Ok(())
    }
}

/// Recursive-descent parser over the selector text; `pos` is a byte offset that always sits on a char boundary.
struct Parser<'a> {
    input: &'a str,
    pos: usize,
}

/// Characters that end a key or value; everything else is gathered into the word and left to label validation,
/// which gives a more useful message than a tokenizer error would.
fn is_delimiter(c: char) -> bool {
    c.is_ascii_whitespace() || matches!(c, ',' | '=' | '!' | '(' | ')')
}

impl<'a> Parser<'a> {
    fn rest(&self) -> &'a str {
        self.input.get(self.pos..).unwrap_or_default()
    }

    fn peek(&self) -> Option<char> {
        self.rest().chars().next()
    }

    fn eat(&mut self, expected: char) -> bool {
        if self.peek() == Some(expected) {
            self.pos += expected.len_utf8();
            true
        } else {
            false
        }
    }

    fn skip_whitespace(&mut self) {
        let rest = self.rest();
        self.pos += rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_whitespace()).len();
    }

    /// Consumes a maximal run of non-delimiter characters; `None` (consuming nothing) if there is none.
    fn word(&mut self) -> Option<&'a str> {
        let rest = self.rest();
        let len = rest.find(is_delimiter).unwrap_or(rest.len());
        if len == 0 {
            return None;
        }
        self.pos += len;
        rest.get(..len)
    }

    /// Describes the next character for "expected X but found Y" messages.
    fn found(&self) -> String {
        match self.peek() {
            None => "end of selector".to_owned(),
            Some(c) => format!("{c:?}"),
        }
    }

    fn error(&self, at: usize, message: impl Into<String>) -> SelectorError {
        // Positions are reported in characters so they line up with what a user sees.
        // Counting chars that start before `at` also copes with an `at` inside a char (the length limit).
        let position = self.input.char_indices().take_while(|&(i, _)| i < at).count();
        SelectorError {
            position,
            message: message.into(),
        }
    }

    fn requirement(&mut self) -> Result<Requirement, SelectorError> {
        if self.eat('!') {
            self.skip_whitespace();
            let key = self.key()?;
            return Ok(Requirement::NotExists { key });
        }
        let key = self.key()?;
        self.skip_whitespace();
        let operator_pos = self.pos;
        match self.peek() {
            None | Some(',') => Ok(Requirement::Exists { key }),
            Some('=') => {
                self.eat('=');
                // "==" is a synonym for "=", but only when written without a gap.
                self.eat('=');
                let value = self.exact_value()?;
                Ok(Requirement::Equals { key, value })
            }
            Some('!') => {
                self.eat('!');
                if !self.eat('=') {
                    return Err(self.error(self.pos, format!("expected '=' after '!' but found {}", self.found())));
                }
                let value = self.exact_value()?;
                Ok(Requirement::NotEquals { key, value })
            }
            _ => match self.word() {
                Some("in") => Ok(Requirement::In {
                    key,
                    values: self.set("in")?,
                }),
                Some("notin") => Ok(Requirement::NotIn {
                    key,
                    values: self.set("notin")?,
                }),
                _ => {
                    self.pos = operator_pos;
                    Err(self.error(
                        operator_pos,
                        format!(
                            "expected '=', '==', '!=', 'in', 'notin', ',' or end of selector after label key but \
                             found {}",
                            self.found()
                        ),
                    ))
                }
            },
        }
    }

    fn key(&mut self) -> Result<String, SelectorError> {
        let at = self.pos;
        let Some(key) = self.word() else {
            return Err(self.error(at, format!("expected a label key but found {}", self.found())));
        };
        check_label_key(key).map_err(|message| self.error(at, message))?;
        Ok(key.to_owned())
    }

    /// The value after `=`, `==` or `!=`; omitted (end or ',') means the empty value, as in Kubernetes.
    fn exact_value(&mut self) -> Result<String, SelectorError> {
        self.skip_whitespace();
        let at = self.pos;
        if matches!(self.peek(), None | Some(',')) {
            return Ok(String::new());
        }
        let Some(value) = self.word() else {
            return Err(self.error(at, format!("expected a label value but found {}", self.found())));
        };
        check_label_value(value).map_err(|message| self.error(at, message))?;
        Ok(value.to_owned())
    }

    /// The parenthesised value list after `in`/`notin`, returned sorted and de-duplicated.
    fn set(&mut self, operator: &str) -> Result<Vec<String>, SelectorError> {
        self.skip_whitespace();
        if !self.eat('(') {
            return Err(self.error(
                self.pos,
                format!("expected '(' after '{operator}' but found {}", self.found()),
            ));
        }
        let mut values = Vec::new();
        loop {
            self.skip_whitespace();
            let at = self.pos;
            let Some(value) = self.word() else {
                let message = if values.is_empty() && self.peek() == Some(')') {
                    format!("'{operator}' needs at least one value")
                } else {
                    format!("expected a label value but found {}", self.found())
                };
                return Err(self.error(at, message));
            };
            if values.len() == MAX_SELECTOR_SET_VALUES {
                return Err(self.error(
                    at,
                    format!("too many values in set; at most {MAX_SELECTOR_SET_VALUES} are allowed"),
                ));
            }
            check_label_value(value).map_err(|message| self.error(at, message))?;
            values.push(value.to_owned());
            self.skip_whitespace();
            if self.eat(')') {
                break;
            }
            if !self.eat(',') {
                return Err(self.error(self.pos, format!("expected ',' or ')' but found {}", self.found())));
            }
        }
        values.sort();
        values.dedup();
        Ok(values)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn parse(input: &str) -> LabelSelector {
        LabelSelector::parse(input).unwrap_or_else(|e| panic!("{input:?} should parse: {e}"))
    }

    fn parse_err(input: &str) -> SelectorError {
        match LabelSelector::parse(input) {
            Ok(s) => panic!("{input:?} should not parse, got {s:?}"),
            Err(e) => e,
        }
    }

    fn eq(key: &str, value: &str) -> Requirement {
        Requirement::Equals {
            key: key.into(),
            value: value.into(),
        }
    }

    fn strings(values: &[&str]) -> Vec<String> {
        values.iter().map(|v| v.to_string()).collect()
    }

    // ---- label maps ----

    #[test]
    fn valid_labels() {
        let long_name = format!("a{}", "b".repeat(62));
        let long_prefix = format!("{}.{}", "p".repeat(126), "q".repeat(126));
        let prefixed = format!("{long_prefix}/{long_name}");
        let labels = map(&[
            ("app", "web"),
            ("app.kubernetes.io/name", "converge"),
            ("Tier_1.x-y", "Front_End.2"),
            ("empty", ""),
            ("A", "Z"),
            ("9", "0"),
            (&long_name, &long_name),
            (&prefixed, "v"),
        ]);
        assert_eq!(validate_labels(&labels), Ok(()));
        assert_eq!(validate_labels(&BTreeMap::new()), Ok(()));
    }

    #[test]
    fn bad_keys_are_reported_per_key_with_escaped_pointer() {
        let labels = map(&[
            ("good", "ok"),
            ("-bad", "ok"),
            ("Example.com/name", "ok"),
            ("a/b/c", "ok"),
            ("/name", "ok"),
            ("example.com/", "ok"),
            ("", "ok"),
        ]);
        let violations = validate_labels(&labels).unwrap_err();
        let fields: Vec<&str> = violations.iter().map(|v| v.field.as_str()).collect();
        // BTreeMap order; "" escapes to nothing, '/' escapes to "~1".
        assert_eq!(
            fields,
            [
                "/labels/",
                "/labels/-bad",
                "/labels/~1name",
                "/labels/Example.com~1name",
                "/labels/a~1b~1c",
                "/labels/example.com~1"
            ]
        );
        let by_field = |f: &str| violations.iter().find(|v| v.field == f).unwrap().description.clone();
        assert_eq!(by_field("/labels/"), "label key must not be empty");
        assert!(by_field("/labels/~1name").contains("prefix before '/' must not be empty"));
        assert!(by_field("/labels/Example.com~1name").contains("must be a DNS subdomain"));
        assert!(by_field("/labels/a~1b~1c").contains("only one '/'"));
        assert!(by_field("/labels/example.com~1").contains("the name after '/' must be 1-63"));
        assert!(by_field("/labels/-bad").starts_with("label key \"-bad\" is invalid: use 1-63 letters"));
    }

    #[test]
    fn key_rules() {
        for key in ["a", "a.b", "a_b", "a-b", "A1", "x/y", "a.b.c/Z_z", "1.2.3/4"] {
            assert_eq!(check_label_key(key), Ok(()), "{key:?}");
        }
        let too_long_name = "a".repeat(64);
        let too_long_prefix = format!("{}/x", "a".repeat(254));
        for key in [
            "_a",
            "a_",
            ".a",
            "a.",
            "a b",
            "a=b",
            "ä",
            &too_long_name,
            &too_long_prefix,
            "a..b/x",
            "-a/x",
            "a_b/x",
            "x/",
        ] {
            assert!(check_label_key(key).is_err(), "{key:?} should be rejected");
        }
    }

    #[test]
    fn bad_values_are_reported() {
        let long = "v".repeat(64);
        let labels = map(&[("a", "-x"), ("b", &long), ("c", "a b"), ("d", "ok"), ("e", "x/y")]);
        let violations = validate_labels(&labels).unwrap_err();
        let fields: Vec<&str> = violations.iter().map(|v| v.field.as_str()).collect();
        assert_eq!(fields, ["/labels/a", "/labels/b", "/labels/c", "/labels/e"]);
        assert_eq!(
            violations[0].description,
            "label value \"-x\" is invalid: use at most 63 letters, digits, '-', '_' or '.', starting and ending \
             with a letter or digit, or leave it empty"
        );
    }

    #[test]
    fn bad_key_and_value_share_one_violation() {
        let violations = validate_labels(&map(&[("-k", "-v")])).unwrap_err();
        assert_eq!(violations.len(), 1);
        assert!(violations[0].description.contains("label key \"-k\""));
        assert!(violations[0].description.contains("; label value \"-v\""));
    }

    #[test]
    fn label_count_limit() {
        let at_limit: BTreeMap<String, String> = (0..MAX_LABELS).map(|i| (format!("k{i}"), "v".into())).collect();
        assert_eq!(validate_labels(&at_limit), Ok(()));
        let mut over = at_limit.clone();
        over.insert("one-more".into(), "v".into());
        assert_eq!(
            validate_labels(&over),
            Err(vec![Violation::new(
                "/labels",
                "too many labels: 65 given, at most 64 are allowed"
            )])
        );
    }

    #[test]
    fn entry_violations_are_capped() {
        let labels: BTreeMap<String, String> = (0..1000).map(|i| (format!("-k{i}"), "v".into())).collect();
        let violations = validate_labels(&labels).unwrap_err();
        assert_eq!(violations[0].field, "/labels");
        assert_eq!(violations.len(), 1 + MAX_LABELS);
    }

    // ---- selector parsing ----

    #[test]
    fn empty_selector_matches_everything() {
        for input in ["", "   ", "\t\n"] {
            let s = parse(input);
            assert!(s.is_empty());
            assert!(s.matches(&BTreeMap::new()));
            assert!(s.matches(&map(&[("a", "b")])));
            assert_eq!(s.to_string(), "");
        }
    }

    #[test]
    fn parses_each_operator() {
        assert_eq!(parse("a=b").requirements, [eq("a", "b")]);
        assert_eq!(parse("a==b").requirements, [eq("a", "b")]);
        assert_eq!(
            parse("a!=b").requirements,
            [Requirement::NotEquals {
                key: "a".into(),
                value: "b".into()
            }]
        );
        assert_eq!(
            parse("a in (x,y)").requirements,
            [Requirement::In {
                key: "a".into(),
                values: strings(&["x", "y"])
            }]
        );
        assert_eq!(
            parse("a notin (x, y)").requirements,
            [Requirement::NotIn {
                key: "a".into(),
                values: strings(&["x", "y"])
            }]
        );
        assert_eq!(parse("a").requirements, [Requirement::Exists { key: "a".into() }]);
        assert_eq!(parse("!a").requirements, [Requirement::NotExists { key: "a".into() }]);
    }

    #[test]
    fn whitespace_is_allowed_around_tokens() {
        let tight = parse("a=b,c!=d,e in (f,g),h notin (i),j,!k");
        let loose = parse("  a = b ,\tc != d , e in ( f , g ) ,h  notin(i) , j , ! k  ");
        assert_eq!(tight, loose);
        assert_eq!(tight.requirements.len(), 6);
        assert_eq!(parse("a in(x)"), parse("a in (x)"));
    }

    #[test]
    fn omitted_exact_value_means_empty_value() {
        assert_eq!(parse("a=").requirements, [eq("a", "")]);
        assert_eq!(
            parse("a= ,b").requirements,
            [eq("a", ""), Requirement::Exists { key: "b".into() }]
        );
        assert_eq!(
            parse("a!=").requirements,
            [Requirement::NotEquals {
                key: "a".into(),
                value: String::new()
            }]
        );
    }

    #[test]
    fn prefixed_and_mixed_case_keys() {
        assert_eq!(
            parse("app.kubernetes.io/name=Web_1").requirements,
            [eq("app.kubernetes.io/name", "Web_1")]
        );
    }

    #[test]
    fn keywords_are_only_special_in_operator_position() {
        assert_eq!(
            parse("in in (in, notin)").requirements,
            [Requirement::In {
                key: "in".into(),
                values: strings(&["in", "notin"])
            }]
        );
        assert_eq!(parse("notin=in").requirements, [eq("notin", "in")]);
        assert_eq!(parse("!in").requirements, [Requirement::NotExists { key: "in".into() }]);
    }

    #[test]
    fn canonical_order_and_dedup() {
        let s = parse("z=1, a in (c, b, c), z=1, m");
        assert_eq!(s.to_string(), "a in (b,c),m,z=1");
        assert_eq!(s, parse("m,a in (b,c),z==1"));
    }

    #[test]
    fn display_examples() {
        assert_eq!(parse("a==b").to_string(), "a=b");
        assert_eq!(parse("a != b").to_string(), "a!=b");
        assert_eq!(parse(" a in ( y , x ) ").to_string(), "a in (x,y)");
        assert_eq!(parse("a notin (x)").to_string(), "a notin (x)");
        assert_eq!(parse("! a").to_string(), "!a");
        assert_eq!(parse("a=").to_string(), "a=");
    }

    #[test]
    fn from_str_matches_parse() {
        let s: LabelSelector = "a=b".parse().unwrap();
        assert_eq!(s, parse("a=b"));
        assert!("a=(".parse::<LabelSelector>().is_err());
    }

    #[test]
    fn error_display_and_positions() {
        let e = parse_err("k in (a");
        assert_eq!(e.position, 7);
        assert_eq!(
            e.to_string(),
            "invalid label selector at character 7: expected ',' or ')' but found end of selector"
        );
        assert_eq!(parse_err("a=b,").position, 4);
        assert_eq!(parse_err(",a").position, 0);
        assert_eq!(
            parse_err("a=b c").message,
            "expected ',' or end of selector but found 'c'"
        );
        assert_eq!(parse_err("a=b c").position, 4);
    }

    #[test]
    fn positions_count_characters_not_bytes() {
        // "é" is two bytes but one character.
        let e = parse_err("é=x");
        assert_eq!(e.position, 0);
        let e = parse_err("a=é");
        assert_eq!(e.position, 2);
        let e = parse_err("a=b,éé=(");
        assert_eq!(e.position, 4);
        let e = parse_err("a in (b,c d)");
        assert_eq!(e.position, 10);
    }

    #[test]
    fn syntax_errors() {
        let cases: &[(&str, usize, &str)] = &[
            ("=b", 0, "expected a label key but found '='"),
            ("!", 1, "expected a label key but found end of selector"),
            ("!=b", 1, "expected a label key but found '='"),
            (
                "a b",
                2,
                "expected '=', '==', '!=', 'in', 'notin', ',' or end of selector after label key but found 'b'",
            ),
            (
                "a)",
                1,
                "expected '=', '==', '!=', 'in', 'notin', ',' or end of selector after label key but found ')'",
            ),
            ("a!b", 2, "expected '=' after '!' but found 'b'"),
            ("a=(", 2, "expected a label value but found '('"),
            ("a = = b", 4, "expected a label value but found '='"),
            ("a in x", 5, "expected '(' after 'in' but found 'x'"),
            ("a notin", 7, "expected '(' after 'notin' but found end of selector"),
            ("a in ()", 6, "'in' needs at least one value"),
            ("a notin ( )", 10, "'notin' needs at least one value"),
            ("a in (x,)", 8, "expected a label value but found ')'"),
            ("a in (,x)", 6, "expected a label value but found ','"),
            ("a in (x y)", 8, "expected ',' or ')' but found 'y'"),
            ("a in (x", 7, "expected ',' or ')' but found end of selector"),
            ("a,,b", 2, "expected a label key but found ','"),
            ("a=b,", 4, "expected a label key but found end of selector"),
            ("a=b=c", 3, "expected ',' or end of selector but found '='"),
            ("a=b)", 3, "expected ',' or end of selector but found ')'"),
        ];
        for (input, position, message) in cases {
            let e = parse_err(input);
            assert_eq!((e.position, e.message.as_str()), (*position, *message), "{input:?}");
        }
    }

    #[test]
    fn unsupported_operators_fail_label_validation() {
        // Set-based comparison operators are not supported; the word is rejected as a key.
        let e = parse_err("a>1");
        assert_eq!(e.position, 0);
        assert!(e.message.starts_with("label key \"a>1\" is invalid"), "{}", e.message);
    }

    #[test]
    fn keys_and_values_are_validated() {
        let e = parse_err("x, Bad.Prefix/a=b");
        assert_eq!(e.position, 3);
        assert!(e.message.contains("DNS subdomain"), "{}", e.message);
        let e = parse_err("a=-b");
        assert_eq!(e.position, 2);
        assert!(e.message.starts_with("label value \"-b\" is invalid"), "{}", e.message);
        let e = parse_err("a in (ok, _bad)");
        assert_eq!(e.position, 10);
        let long_value = "v".repeat(64);
        assert!(LabelSelector::parse(&format!("a={long_value}")).is_err());
        assert!(LabelSelector::parse(&format!("a={}", &long_value[1..])).is_ok());
    }

    #[test]
    fn input_length_limit() {
        // 8 bytes per requirement, well under the requirement limit: only the length matters here.
        let at_limit = format!("{}={}", "k", "v".repeat(MAX_SELECTOR_LEN - 2));
        assert_eq!(at_limit.len(), MAX_SELECTOR_LEN);
        // Too long a value, but the length check itself passes.
        assert!(parse_err(&at_limit).message.starts_with("label value"));
        let over = " ".repeat(MAX_SELECTOR_LEN + 1);
        let e = parse_err(&over);
        assert_eq!(e.position, MAX_SELECTOR_LEN);
        assert_eq!(e.message, "selector is 4097 bytes long; at most 4096 are allowed");
        // The limit falls inside a two-byte character: the position is still a character count.
        let straddling = format!("a{}", "é".repeat(MAX_SELECTOR_LEN / 2));
        assert_eq!(parse_err(&straddling).position, 1 + (MAX_SELECTOR_LEN - 1) / 2 + 1);
    }

    #[test]
    fn requirement_count_limit() {
        let keys: Vec<String> = (0..MAX_SELECTOR_REQUIREMENTS).map(|i| format!("k{i}")).collect();
        let at_limit = keys.join(",");
        assert_eq!(parse(&at_limit).requirements.len(), MAX_SELECTOR_REQUIREMENTS);
        let over = format!("{at_limit}, extra");
        let e = parse_err(&over);
        assert_eq!(e.position, at_limit.len() + 2);
        assert_eq!(e.message, "too many requirements; at most 64 are allowed");
    }

    #[test]
    fn set_size_limit() {
        let values: Vec<String> = (0..MAX_SELECTOR_SET_VALUES).map(|i| format!("v{i}")).collect();
        let at_limit = format!("a in ({})", values.join(","));
        assert_eq!(
            parse(&at_limit).to_string().matches(',').count(),
            MAX_SELECTOR_SET_VALUES - 1
        );
        let over = format!("a notin ({},extra)", values.join(","));
        let e = parse_err(&over);
        assert_eq!(e.message, "too many values in set; at most 64 are allowed");
        assert_eq!(e.position, over.len() - "extra)".len());
    }

    // ---- matching ----

    #[test]
    fn matching_semantics() {
        let web = map(&[("app", "web"), ("tier", "front"), ("empty", "")]);
        let bare = BTreeMap::new();
        let cases: &[(&str, bool, bool)] = &[
            // (selector, matches `web`, matches `bare`)
            ("app=web", true, false),
            ("app==db", false, false),
            ("app!=db", true, true),
            ("app!=web", false, true),
            ("app in (db, web)", true, false),
            ("app in (db)", false, false),
            ("app notin (db)", true, true),
            ("app notin (web)", false, true),
            ("app", true, false),
            ("!app", false, true),
            ("empty=", true, false),
            ("empty", true, false),
            ("empty!=", false, true),
            ("missing=", false, false),
            ("app=web,tier=front", true, false),
            ("app=web,tier=back", false, false),
            ("app=web,!canary", true, false),
            ("!canary,missing notin (x)", true, true),
        ];
        for (input, on_web, on_bare) in cases {
            let s = parse(input);
            assert_eq!(s.matches(&web), *on_web, "{input:?} on web");
            assert_eq!(s.matches(&bare), *on_bare, "{input:?} on no labels");
        }
    }

    #[test]
    fn requirement_key_accessor() {
        for r in parse("a=1,b!=2,c in (3),d notin (4),e,!f").requirements {
            assert_eq!(
                r.to_string().trim_start_matches('!').chars().next(),
                r.key().chars().next()
            );
        }
    }

    // ---- round trips ----

    /// Small deterministic generator (xorshift64*), so the "property" tests need no extra dependency.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
        }

        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }

        fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
            items[self.below(items.len())]
        }
    }

    const KEYS: &[&str] = &[
        "a",
        "b",
        "app",
        "in",
        "notin",
        "app.kubernetes.io/name",
        "x.y/Z_9",
        "T-1",
    ];
    const VALUES: &[&str] = &["v", "web", "in", "A.b-c_d", "0", "notin"];

    /// A random requirement together with one of the many ways of writing it.
    fn random_requirement(rng: &mut Rng) -> (Requirement, String) {
        let space = |rng: &mut Rng| [" ", "", "  ", "\t"][rng.below(4)].to_owned();
        let key = rng.pick(KEYS);
        let (s1, s2, s3) = (space(rng), space(rng), space(rng));
        let value = rng.pick(VALUES);
        match rng.below(7) {
            0 => (eq(key, value), format!("{s1}{key}{s2}={s3}{value}")),
            1 => (eq(key, value), format!("{s1}{key}{s2}=={s3}{value}")),
            2 => (
                Requirement::NotEquals {
                    key: key.into(),
                    value: value.into(),
                },
                format!("{s1}{key}{s2}!={s3}{value}"),
            ),
            3 | 4 => {
                let n = 1 + rng.below(4);
                let values: Vec<&str> = (0..n).map(|_| rng.pick(VALUES)).collect();
                let text = |op: &str| format!("{s1}{key} {op}{s2}({s3}{}{s2}){s3}", values.join(&format!("{s2},{s3}")));
                let mut set = strings(&values);
                set.sort();
                set.dedup();
                if rng.below(2) == 0 {
                    (
                        Requirement::In {
                            key: key.into(),
                            values: set,
                        },
                        text("in"),
                    )
                } else {
                    (
                        Requirement::NotIn {
                            key: key.into(),
                            values: set,
                        },
                        text("notin"),
                    )
                }
            }
            5 => (Requirement::Exists { key: key.into() }, format!("{s1}{key}{s2}")),
            _ => (
                Requirement::NotExists { key: key.into() },
                format!("{s1}!{s2}{key}{s3}"),
            ),
        }
    }

    #[test]
    fn random_valid_selectors_parse_as_built_and_round_trip() {
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        for _ in 0..2000 {
            let (mut expected, text): (Vec<Requirement>, Vec<String>) =
                (0..1 + rng.below(6)).map(|_| random_requirement(&mut rng)).unzip();
            let input = text.join(",");
            let selector = parse(&input);
            expected.sort_by(|a, b| a.key().cmp(b.key()).then_with(|| a.cmp(b)));
            expected.dedup();
            assert_eq!(selector.requirements, expected, "{input:?}");
            let canonical = selector.to_string();
            let reparsed = parse(&canonical);
            assert_eq!(reparsed, selector, "{input:?} -> {canonical:?}");
            assert_eq!(reparsed.to_string(), canonical, "canonical form must be a fixed point");
        }
    }

    #[test]
    fn random_garbage_never_panics_and_round_trips_when_accepted() {
        let tokens = &[
            "a", "b", "=", "==", "!=", "!", "in", "notin", "(", ")", ",", " ", "x/y", "-", "é", "\t", ">",
        ];
        let mut rng = Rng(42);
        let mut accepted = 0;
        for _ in 0..5000 {
            let input: String = (0..rng.below(10)).map(|_| rng.pick(tokens)).collect();
            match LabelSelector::parse(&input) {
                Ok(selector) => {
                    accepted += 1;
                    assert_eq!(parse(&selector.to_string()), selector, "{input:?}");
                }
                Err(e) => assert!(e.position <= input.chars().count(), "{input:?}: {e}"),
            }
        }
        assert!(
            accepted > 100,
            "generator should produce some valid selectors, got {accepted}"
        );
    }
}

//! Validation of resource names, kind names and kind versions.

use super::violation::Violation;

/// Longest accepted resource name, the DNS-subdomain limit.
pub const MAX_RESOURCE_NAME_LEN: usize = 253;

/// Longest accepted kind name, the DNS-label limit.
pub const MAX_KIND_NAME_LEN: usize = 63;

/// Largest accepted kind version; versions are stored as a Postgres `smallint`.
pub const MAX_KIND_VERSION: i32 = i16::MAX as i32;

const RESOURCE_NAME_RULE: &str =
    "use 1-253 lower-case letters, digits, '-' or '.', starting and ending with a letter or digit";

const KIND_NAME_RULE: &str =
    "use 1-63 lower-case letters, digits or '-', starting with a letter and ending with a letter or digit";

/// Longest prefix of a user-supplied value echoed back in a description, so errors stay small.
const MAX_QUOTED_CHARS: usize = 64;

/// Checks that `name` is a valid resource name: 1-253 lower-case letters, digits, '-' and '.', starting and
/// ending with a letter or digit, with a letter or digit on both sides of every '.' (a DNS subdomain).
///
/// `field` is the JSON pointer reported in the violation, e.g. "/name".
pub fn validate_resource_name(field: &str, name: &str) -> Result<(), Violation> {
    check_dns_subdomain(name).map_err(|problem| {
        let description = match problem {
            SubdomainProblem::Empty => format!("name is required: {RESOURCE_NAME_RULE}"),
            SubdomainProblem::TooLong => format!(
                "name {} is invalid: it is {} characters long; {RESOURCE_NAME_RULE}",
                quote(name),
                name.chars().count()
            ),
            SubdomainProblem::BadCharacterOrEnd => format!("name {} is invalid: {RESOURCE_NAME_RULE}", quote(name)),
            SubdomainProblem::BadSegment => format!(
                "name {} is invalid: every '.' must have a letter or digit on both sides; {RESOURCE_NAME_RULE}",
                quote(name)
            ),
        };
        Violation::new(field, description)
    })
}

/// Checks that `kind` is a valid kind name: 1-63 lower-case letters, digits and '-', starting with a letter and
/// ending with a letter or digit (a DNS label that does not start with a digit).
///
/// `field` is the JSON pointer reported in the violation, e.g. "/kind".
pub fn validate_kind_name(field: &str, kind: &str) -> Result<(), Violation> {
    let bytes = kind.as_bytes();
    let description = if bytes.is_empty() {
        format!("kind is required: {KIND_NAME_RULE}")
    } else if !bytes.iter().all(|&b| is_lower_alnum(b) || b == b'-') {
        format!("kind {} is invalid: {KIND_NAME_RULE}", quote(kind))
    } else if bytes.len() > MAX_KIND_NAME_LEN {
        // Only ASCII is left at this point, so the byte length is the character count.
        format!(
            "kind {} is invalid: it is {} characters long; {KIND_NAME_RULE}",
            quote(kind),
            bytes.len()
        )
    } else if !bytes.first().is_some_and(u8::is_ascii_lowercase) || !bytes.last().is_some_and(|&b| is_lower_alnum(b)) {
        format!("kind {} is invalid: {KIND_NAME_RULE}", quote(kind))
    } else {
        return Ok(());
    };
    Err(Violation::new(field, description))
}

/// Checks that `v` is a valid kind version: from 1 to [`MAX_KIND_VERSION`] (32767) inclusive.
///
/// `field` is the JSON pointer reported in the violation, e.g. "/version".
pub fn validate_kind_version(field: &str, v: i32) -> Result<(), Violation> {
    if (1..=MAX_KIND_VERSION).contains(&v) {
        Ok(())
    } else {
        Err(Violation::new(
            field,
            format!("kind version {v} is invalid: use a whole number from 1 to {MAX_KIND_VERSION}"),
        ))
    }
}

/// Why a string is not a DNS subdomain; lets callers word their own descriptions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SubdomainProblem {
    /// The string is empty.
    Empty,
    /// Longer than [`MAX_RESOURCE_NAME_LEN`] (only reported when every character is allowed).
    TooLong,
    /// A character outside `[a-z0-9.-]`, or a first/last character that is not a letter or digit.
    BadCharacterOrEnd,
    /// An empty '.'-separated segment or one starting/ending with '-'.
    BadSegment,
}

/// Checks the RFC 1123 subdomain syntax used by Kubernetes: dot-separated lower-case alphanumeric segments that may
/// contain '-' inside, at most 253 characters in total.
pub(crate) fn check_dns_subdomain(s: &str) -> Result<(), SubdomainProblem> {
    let bytes = s.as_bytes();
    let (Some(&first), Some(&last)) = (bytes.first(), bytes.last()) else {
        return Err(SubdomainProblem::Empty);
    };
    // Character set before length, so "too long" is only claimed for strings that are otherwise plausible.
    if !bytes.iter().all(|&b| is_lower_alnum(b) || b == b'-' || b == b'.') {
        return Err(SubdomainProblem::BadCharacterOrEnd);
    }
    if bytes.len() > MAX_RESOURCE_NAME_LEN {
        return Err(SubdomainProblem::TooLong);
    }
    if !is_lower_alnum(first) || !is_lower_alnum(last) {
        return Err(SubdomainProblem::BadCharacterOrEnd);
    }
    let segments_ok = s.split('.').all(|segment| {
        let seg = segment.as_bytes();
        seg.first().is_some_and(|&b| is_lower_alnum(b)) && seg.last().is_some_and(|&b| is_lower_alnum(b))
    });
    if segments_ok {
        Ok(())
    } else {
        Err(SubdomainProblem::BadSegment)
    }
}

fn is_lower_alnum(b: u8) -> bool {
    b.is_ascii_lowercase() || b.is_ascii_digit()
}

/// The first `max` characters of `text` (all of it when shorter).
pub fn first_chars(text: &str, max: usize) -> &str {
    match text.char_indices().nth(max) {
        Some((end, _)) => text.get(..end).unwrap_or(text),
        None => text,
    }
}

/// Quotes a user-supplied value for a description: escapes control characters and quotes (via `Debug`) and
/// truncates long values so an error cannot echo back megabytes of input.
pub(crate) fn quote(value: &str) -> String {
    match value.char_indices().nth(MAX_QUOTED_CHARS) {
        None => format!("{value:?}"),
        Some((cut, _)) => format!(
            "{:?}... ({} characters)",
            value.get(..cut).unwrap_or_default(),
            value.chars().count()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resource_err(name: &str) -> String {
        validate_resource_name("/name", name).unwrap_err().description
    }

    #[test]
    fn resource_names_accepted() {
        let long = format!("{}.{}", "a".repeat(126), "b".repeat(126));
        assert_eq!(long.len(), 253);
        for name in [
            "a",
            "0",
            "abc",
            "a-b",
            "a--b",
            "a.b",
            "a1.b2-c3",
            "web-01.prod.example",
            "9lives",
            &long,
        ] {
            assert_eq!(validate_resource_name("/name", name), Ok(()), "{name:?}");
        }
    }

    #[test]
    fn resource_name_example_description() {
        assert_eq!(
            validate_resource_name("/name", "Foo_1"),
            Err(Violation::new(
                "/name",
                "name \"Foo_1\" is invalid: use 1-253 lower-case letters, digits, '-' or '.', \
                 starting and ending with a letter or digit"
            ))
        );
    }

    #[test]
    fn resource_names_rejected() {
        for name in [
            "A", "aB", "a_b", "a b", " a", "a/b", "a:b", "ä", "-a", "a-", ".a", "a.", "a..b", "a.-b", "a-.b", "a.b-",
            "-", ".", "a\n",
        ] {
            assert!(
                validate_resource_name("/name", name).is_err(),
                "{name:?} should be rejected"
            );
        }
    }

    #[test]
    fn resource_name_reports_given_field() {
        assert_eq!(
            validate_resource_name("/spec/target", "A").unwrap_err().field,
            "/spec/target"
        );
    }

    #[test]
    fn empty_resource_name_is_required() {
        assert_eq!(
            resource_err(""),
            "name is required: use 1-253 lower-case letters, digits, '-' or '.', \
             starting and ending with a letter or digit"
        );
    }

    #[test]
    fn resource_name_segment_problem_is_explained() {
        for name in ["a..b", "a.-b", "a-.b"] {
            assert!(
                resource_err(name).contains("every '.' must have a letter or digit on both sides"),
                "{name}"
            );
        }
    }

    #[test]
    fn resource_name_length_limit() {
        let too_long = "a".repeat(254);
        let description = resource_err(&too_long);
        assert!(description.contains("it is 254 characters long"), "{description}");
        // The value is truncated in the description.
        assert!(description.contains("... (254 characters)"), "{description}");
        assert!(description.len() < 300, "{description}");
    }

    #[test]
    fn resource_name_description_escapes_control_characters() {
        assert!(resource_err("a\"\n").starts_with(r#"name "a\"\n" is invalid"#));
    }

    #[test]
    fn kind_names_accepted() {
        let long = format!("a{}", "b".repeat(62));
        for kind in ["a", "web", "web-app", "a1", "a-1", "x--y", &long] {
            assert_eq!(validate_kind_name("/kind", kind), Ok(()), "{kind:?}");
        }
    }

    #[test]
    fn kind_names_rejected() {
        let long = "a".repeat(64);
        for kind in ["", "1a", "-a", "a-", "A", "aB", "a.b", "a_b", "a b", "é", &long] {
            let err = validate_kind_name("/kind", kind).unwrap_err();
            assert_eq!(err.field, "/kind");
            assert!(
                err.description.contains(KIND_NAME_RULE),
                "{kind:?}: {}",
                err.description
            );
        }
    }

    #[test]
    fn kind_name_descriptions() {
        assert_eq!(
            validate_kind_name("/kind", "1web").unwrap_err().description,
            "kind \"1web\" is invalid: use 1-63 lower-case letters, digits or '-', \
             starting with a letter and ending with a letter or digit"
        );
        assert!(
            validate_kind_name("/kind", "")
                .unwrap_err()
                .description
                .starts_with("kind is required: ")
        );
        let long = "a".repeat(64);
        assert!(
            validate_kind_name("/kind", &long)
                .unwrap_err()
                .description
                .contains("it is 64 characters long")
        );
    }

    #[test]
    fn kind_versions() {
        for v in [1, 2, 100, 32767] {
            assert_eq!(validate_kind_version("/version", v), Ok(()), "{v}");
        }
        for v in [0, -1, 32768, i32::MIN, i32::MAX] {
            let err = validate_kind_version("/version", v).unwrap_err();
            assert_eq!(err.field, "/version");
            assert_eq!(
                err.description,
                format!("kind version {v} is invalid: use a whole number from 1 to 32767")
            );
        }
    }

    #[test]
    fn subdomain_problems() {
        assert_eq!(check_dns_subdomain(""), Err(SubdomainProblem::Empty));
        assert_eq!(check_dns_subdomain("A"), Err(SubdomainProblem::BadCharacterOrEnd));
        assert_eq!(check_dns_subdomain("-a"), Err(SubdomainProblem::BadCharacterOrEnd));
        assert_eq!(check_dns_subdomain("a..b"), Err(SubdomainProblem::BadSegment));
        assert_eq!(check_dns_subdomain(&"a".repeat(254)), Err(SubdomainProblem::TooLong));
        // Bad characters win over length so a long garbage value is not described as merely too long.
        assert_eq!(
            check_dns_subdomain(&"A".repeat(300)),
            Err(SubdomainProblem::BadCharacterOrEnd)
        );
    }

    #[test]
    fn quote_truncates_on_char_boundaries() {
        assert_eq!(quote("abc"), "\"abc\"");
        let long = "é".repeat(70);
        let quoted = quote(&long);
        assert_eq!(quoted, format!("\"{}\"... (70 characters)", "é".repeat(64)));
    }
}

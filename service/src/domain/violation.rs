//! Field-level problems with a request, addressed by JSON pointer.

/// One problem with one field of a request. `field` is a JSON pointer (RFC 6901) into the
/// request's JSON form using proto field names, e.g. "/name", "/labels/app.kubernetes.io~1name", "/spec/ports/0".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// JSON pointer (RFC 6901) to the offending field, using proto field names.
    pub field: String,
    /// Human-readable explanation of what is wrong and how to fix it.
    pub description: String,
}

impl Violation {
    /// Creates a violation of `field` (a JSON pointer) described by `description`.
    pub fn new(field: impl Into<String>, description: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            description: description.into(),
        }
    }
}

/// Escapes one JSON-pointer reference token ("~" -> "~0", "/" -> "~1").
pub fn pointer_token(token: &str) -> String {
    // '~' must go first, or the "~1" written for '/' would itself be escaped to "~01".
    token.replace('~', "~0").replace('/', "~1")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_accepts_str_and_string() {
        let v = Violation::new("/name", String::from("bad"));
        assert_eq!(v.field, "/name");
        assert_eq!(v.description, "bad");
    }

    #[test]
    fn pointer_token_leaves_plain_tokens_alone() {
        assert_eq!(pointer_token("app"), "app");
        assert_eq!(pointer_token(""), "");
    }

    #[test]
    fn pointer_token_escapes_slash_and_tilde() {
        assert_eq!(pointer_token("app.kubernetes.io/name"), "app.kubernetes.io~1name");
        assert_eq!(pointer_token("a~b"), "a~0b");
        // A literal "~1" must not be confused with an escaped '/'.
        assert_eq!(pointer_token("~1"), "~01");
        assert_eq!(pointer_token("/~"), "~1~0");
    }
}

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

/// Longest field pointer a violation keeps, in bytes: pointers echo caller
/// keys, and an error must stay small enough for any client's metadata limit.
pub const MAX_FIELD_BYTES: usize = 256;

/// Longest description a violation keeps, in bytes.
pub const MAX_DESCRIPTION_BYTES: usize = 512;

impl Violation {
    /// Creates a violation of `field` (a JSON pointer) described by
    /// `description`, each clipped to its bound ([`MAX_FIELD_BYTES`],
    /// [`MAX_DESCRIPTION_BYTES`]).
    pub fn new(field: impl Into<String>, description: impl Into<String>) -> Self {
        Self {
            field: clip(field.into(), MAX_FIELD_BYTES),
            description: clip(description.into(), MAX_DESCRIPTION_BYTES),
        }
    }
}

/// Marks text cut by [`clip`].
const ELLIPSIS: &str = "…";

/// `text` cut to at most `max` bytes on a character boundary, ending in "…"
/// when it was cut. Everything an error echoes of a caller's input goes
/// through this, so no input makes an error unbounded.
pub fn clip(text: String, max: usize) -> String {
    if text.len() <= max {
        return text;
    }
    let mut end = max.saturating_sub(ELLIPSIS.len());
    while end > 0 && !text.is_char_boundary(end) {
        end -= 1;
    }
    let mut clipped = text;
    clipped.truncate(end);
    clipped.push_str(ELLIPSIS);
    clipped
}

/// Refuses text that PostgreSQL cannot store: its `text` and `jsonb` types
/// have no representation for U+0000.
pub fn check_storable_text(field: &str, text: &str) -> Result<(), Violation> {
    if text.contains('\0') {
        Err(Violation::new(
            field,
            "contains the character U+0000, which cannot be stored",
        ))
    } else {
        Ok(())
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
    fn long_fields_and_descriptions_are_clipped_on_a_char_boundary() {
        let key = "é".repeat(5000);
        let v = Violation::new(format!("/labels/{key}"), format!("label key {key} is too long"));
        assert!(
            v.field.len() <= MAX_FIELD_BYTES && v.field.ends_with('…'),
            "{}",
            v.field.len()
        );
        assert!(v.description.len() <= MAX_DESCRIPTION_BYTES);
        assert_eq!(clip("short".to_owned(), 10), "short");
        assert_eq!(clip("abcdef".to_owned(), 4), "a…");
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

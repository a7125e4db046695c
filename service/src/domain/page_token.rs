//! Opaque keyset-pagination cursors for list methods, plus page-size defaults.
//!
//! A token records where the previous page stopped (the sort-key values of its last row) and a hash of the filters
//! it was issued for. Tokens are opaque but not signed: a client can forge one, so the position must only ever be
//! used as bound query parameters, never trusted beyond that.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

use super::violation::Violation;

/// Longest page token accepted by [`PageToken::decode`], in characters.
pub const MAX_PAGE_TOKEN_LEN: usize = 1024;

/// Page size used when a request leaves `page_size` at 0.
pub const DEFAULT_PAGE_SIZE: usize = 100;

/// Largest page size served; larger requests are clamped to it.
pub const MAX_PAGE_SIZE: usize = 1000;

/// Binary format version; bump it when the layout changes so old tokens fail clearly instead of misparsing.
const VERSION: u8 = 1;

const TAG_INT: u8 = 1;
const TAG_TEXT: u8 = 2;
const TAG_UUID: u8 = 3;

/// One value of a keyset position, e.g. the create time or id of the last row returned.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum PositionPart {
    /// An integer sort key, e.g. a timestamp in microseconds.
    Int(i64),
    /// A text sort key, e.g. a name.
    Text(String),
    /// A UUID sort key, typically the tie-breaking id.
    Uuid(uuid::Uuid),
}

/// A decoded page token: where the next page starts, and which filters the token was issued for.
///
/// For example, listing resources uses `position = [Int(create_time_micros), Uuid(id)]` of the last row returned.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PageToken {
    /// Sort-key values of the last row of the previous page.
    pub position: Vec<PositionPart>,
    /// [`filter_hash`] of the request fields the token is only valid with.
    pub filter_hash: u64,
}

/// Why a page token was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PageTokenError {
    /// The token is the empty string; callers normally treat that as "first page" before decoding.
    #[error("page token is empty")]
    Empty,
    /// The token is longer than [`MAX_PAGE_TOKEN_LEN`].
    #[error("page token is too long: {len} characters, at most {MAX_PAGE_TOKEN_LEN} are allowed")]
    TooLong {
        /// Length of the rejected token in characters.
        len: usize,
    },
    /// The token is not canonical URL-safe base64 without padding.
    #[error("page token is not valid: it is not a token returned by this service")]
    NotBase64,
    /// The token was written by an incompatible version of the service.
    #[error("page token has unsupported version {0}; start again from the first page")]
    UnsupportedVersion(u8),
    /// The token ends in the middle of a field.
    #[error("page token is not valid: it is truncated")]
    Truncated,
    /// A position part has an unknown type tag.
    #[error("page token is not valid: unknown position part type {0}")]
    UnknownPartTag(u8),
    /// A text position part is not UTF-8.
    #[error("page token is not valid: a text position part is not UTF-8")]
    InvalidText,
    /// A length or count field is malformed or out of range.
    #[error("page token is not valid: a length field is malformed")]
    InvalidLength,
    /// Bytes follow the end of the token.
    #[error("page token is not valid: {0} unexpected bytes after the end")]
    TrailingBytes(usize),
    /// The token was issued for a request with different filters (see [`PageToken::check_filter`]).
    #[error(
        "page token does not match this request: keep every other field the same as in the request that returned \
         it, or start again from the first page"
    )]
    FilterMismatch,
    /// The token's position does not have the shape this list method uses; for handlers to return when matching
    /// [`PageToken::position`] fails, e.g. a token from another list method.
    #[error("page token was not issued by this list method")]
    PositionMismatch,
}

impl PageTokenError {
    /// This error as a violation of the request's "/page_token" field.
    pub fn to_violation(&self) -> Violation {
        Violation::new("/page_token", self.to_string())
    }
}

impl PageToken {
    /// Encodes the token as URL-safe base64 (no padding) of: a version byte; the part count as a LEB128 varint;
    /// each part as a type tag followed by 8 big-endian bytes (int), a varint byte length and UTF-8 bytes (text) or
    /// 16 bytes (UUID); and finally the filter hash as 8 big-endian bytes.
    ///
    /// Keep positions small: a token longer than [`MAX_PAGE_TOKEN_LEN`] (about 760 encoded bytes) is rejected by
    /// [`PageToken::decode`].
    pub fn encode(&self) -> String {
        let mut bytes = Vec::with_capacity(64);
        bytes.push(VERSION);
        put_varint(&mut bytes, self.position.len() as u64);
        for part in &self.position {
            match part {
                PositionPart::Int(v) => {
                    bytes.push(TAG_INT);
                    bytes.extend_from_slice(&v.to_be_bytes());
                }
                PositionPart::Text(s) => {
                    bytes.push(TAG_TEXT);
                    put_varint(&mut bytes, s.len() as u64);
                    bytes.extend_from_slice(s.as_bytes());
                }
                PositionPart::Uuid(u) => {
                    bytes.push(TAG_UUID);
                    bytes.extend_from_slice(u.as_bytes());
                }
            }
        }
        bytes.extend_from_slice(&self.filter_hash.to_be_bytes());
        URL_SAFE_NO_PAD.encode(bytes)
    }

    /// Decodes a token produced by [`PageToken::encode`], rejecting anything else: oversized input, invalid or
    /// non-canonical base64, other versions, truncation, unknown part types, invalid UTF-8 and trailing bytes.
    ///
    /// Every accepted token re-encodes to exactly the input.
    pub fn decode(s: &str) -> Result<PageToken, PageTokenError> {
        if s.is_empty() {
            return Err(PageTokenError::Empty);
        }
        if s.len() > MAX_PAGE_TOKEN_LEN {
            return Err(PageTokenError::TooLong { len: s.chars().count() });
        }
        let bytes = URL_SAFE_NO_PAD.decode(s).map_err(|_| PageTokenError::NotBase64)?;
        let mut reader = Reader { bytes: &bytes, pos: 0 };
        let version = reader.byte()?;
        if version != VERSION {
            return Err(PageTokenError::UnsupportedVersion(version));
        }
        let count = usize::try_from(reader.varint()?).map_err(|_| PageTokenError::InvalidLength)?;
        // Every part takes at least one byte, so this rejects a forged count before it can size an allocation.
        if count > reader.remaining() {
            return Err(PageTokenError::Truncated);
        }
        let mut position = Vec::with_capacity(count);
        for _ in 0..count {
            let part = match reader.byte()? {
                TAG_INT => PositionPart::Int(i64::from_be_bytes(reader.array()?)),
                TAG_TEXT => {
                    let len = usize::try_from(reader.varint()?).map_err(|_| PageTokenError::InvalidLength)?;
                    let text = std::str::from_utf8(reader.take(len)?).map_err(|_| PageTokenError::InvalidText)?;
                    PositionPart::Text(text.to_owned())
                }
                TAG_UUID => PositionPart::Uuid(uuid::Uuid::from_bytes(reader.array()?)),
                tag => return Err(PageTokenError::UnknownPartTag(tag)),
            };
            position.push(part);
        }
        let filter_hash = u64::from_be_bytes(reader.array()?);
        if reader.remaining() > 0 {
            return Err(PageTokenError::TrailingBytes(reader.remaining()));
        }
        Ok(PageToken { position, filter_hash })
    }

    /// Checks that the token was issued for a request whose filters hash to `expected` (see [`filter_hash`]).
    pub fn check_filter(&self, expected: u64) -> Result<(), PageTokenError> {
        if self.filter_hash == expected {
            Ok(())
        } else {
            Err(PageTokenError::FilterMismatch)
        }
    }
}

/// A stable 64-bit hash of the request fields a page token is tied to (filter, parent, ordering, ...).
///
/// FNV-1a over each part prefixed by its length as 8 little-endian bytes, so `["ab", "c"]` and `["a", "bc"]` differ.
/// Unlike std's `DefaultHasher` it is unseeded and fixed, so tokens stay valid across restarts and Rust upgrades.
pub fn filter_hash(parts: &[&str]) -> u64 {
    let mut hash = FNV_OFFSET_BASIS;
    for part in parts {
        hash = fnv1a(hash, &(part.len() as u64).to_le_bytes());
        hash = fnv1a(hash, part.as_bytes());
    }
    hash
}

const FNV_OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

fn fnv1a(mut hash: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(FNV_PRIME);
    }
    hash
}

/// Resolves a request's `page_size`: 0 means [`DEFAULT_PAGE_SIZE`], values above [`MAX_PAGE_SIZE`] are clamped to
/// it, and negative values are a violation of "/page_size".
pub fn page_size(requested: i32) -> Result<usize, Violation> {
    match usize::try_from(requested) {
        Ok(0) => Ok(DEFAULT_PAGE_SIZE),
        Ok(n) => Ok(n.min(MAX_PAGE_SIZE)),
        Err(_) => Err(Violation::new(
            "/page_size",
            format!("page_size must not be negative (got {requested}); use 0 for the default of {DEFAULT_PAGE_SIZE}"),
        )),
    }
}

fn put_varint(bytes: &mut Vec<u8>, mut v: u64) {
    loop {
        let low = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            bytes.push(low);
            return;
        }
        bytes.push(low | 0x80);
    }
}

/// Bounds-checked cursor over the decoded bytes; every read reports truncation instead of panicking.
struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn remaining(&self) -> usize {
        self.bytes.len().saturating_sub(self.pos)
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], PageTokenError> {
        let end = self.pos.checked_add(n).ok_or(PageTokenError::Truncated)?;
        let slice = self.bytes.get(self.pos..end).ok_or(PageTokenError::Truncated)?;
        self.pos = end;
        Ok(slice)
    }

    fn byte(&mut self) -> Result<u8, PageTokenError> {
        let [b] = self.array()?;
        Ok(b)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], PageTokenError> {
        <[u8; N]>::try_from(self.take(N)?).map_err(|_| PageTokenError::Truncated)
    }

    /// Reads a LEB128 varint, rejecting overlong forms (so each value has one encoding) and values beyond u64.
    fn varint(&mut self) -> Result<u64, PageTokenError> {
        let mut value = 0u64;
        for i in 0..10 {
            let b = self.byte()?;
            // The tenth byte may only carry the top bit of a u64.
            if i == 9 && b > 1 {
                return Err(PageTokenError::InvalidLength);
            }
            value |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                // A zero final byte after others means the value had a shorter encoding.
                if i > 0 && b == 0 {
                    return Err(PageTokenError::InvalidLength);
                }
                return Ok(value);
            }
        }
        Err(PageTokenError::InvalidLength)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uuid(n: u128) -> uuid::Uuid {
        uuid::Uuid::from_u128(n)
    }

    fn sample() -> PageToken {
        PageToken {
            position: vec![
                PositionPart::Int(1_700_000_000_123_456),
                PositionPart::Uuid(uuid(0x0123_4567_89ab_cdef_0123_4567_89ab_cdef)),
            ],
            filter_hash: filter_hash(&["parent=x", "app=web"]),
        }
    }

    /// Raw bytes of an encoded token, for tampering.
    fn raw(token: &PageToken) -> Vec<u8> {
        URL_SAFE_NO_PAD.decode(token.encode()).unwrap()
    }

    fn decode_raw(bytes: &[u8]) -> Result<PageToken, PageTokenError> {
        PageToken::decode(&URL_SAFE_NO_PAD.encode(bytes))
    }

    #[test]
    fn round_trips() {
        let tokens = [
            sample(),
            PageToken {
                position: vec![],
                filter_hash: 0,
            },
            PageToken {
                position: vec![
                    PositionPart::Int(i64::MIN),
                    PositionPart::Int(i64::MAX),
                    PositionPart::Int(-1),
                    PositionPart::Text(String::new()),
                    PositionPart::Text("héllo/wörld ✓".into()),
                    PositionPart::Text("x".repeat(300)),
                    PositionPart::Uuid(uuid::Uuid::nil()),
                    PositionPart::Uuid(uuid::Uuid::new_v4()),
                ],
                filter_hash: u64::MAX,
            },
        ];
        for token in tokens {
            let encoded = token.encode();
            assert!(encoded.len() <= MAX_PAGE_TOKEN_LEN);
            assert_eq!(PageToken::decode(&encoded), Ok(token.clone()), "{encoded}");
        }
    }

    #[test]
    fn encoding_is_url_safe_without_padding() {
        for n in 0..64u128 {
            let token = PageToken {
                position: vec![
                    PositionPart::Uuid(uuid(u128::MAX / 63 * n)),
                    PositionPart::Text("?".repeat(n as usize)),
                ],
                filter_hash: n as u64 * 0x0101_0101_0101_0101,
            };
            let encoded = token.encode();
            assert!(
                encoded
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'),
                "{encoded}"
            );
        }
    }

    #[test]
    fn format_is_stable() {
        // Pinned so a layout change is a deliberate decision (which also needs a VERSION bump).
        let token = PageToken {
            position: vec![
                PositionPart::Int(1),
                PositionPart::Text("ab".into()),
                PositionPart::Uuid(uuid(2)),
            ],
            filter_hash: 3,
        };
        let mut expected = vec![
            VERSION, 3, TAG_INT, 0, 0, 0, 0, 0, 0, 0, 1, TAG_TEXT, 2, b'a', b'b', TAG_UUID,
        ];
        expected.extend_from_slice(&[0; 15]);
        expected.push(2);
        expected.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 3]);
        assert_eq!(raw(&token), expected);
        assert_eq!(token.encode(), "AQMBAAAAAAAAAAECAmFiAwAAAAAAAAAAAAAAAAAAAAIAAAAAAAAAAw");
    }

    #[test]
    fn rejects_empty_and_oversized() {
        assert_eq!(PageToken::decode(""), Err(PageTokenError::Empty));
        let long = "A".repeat(MAX_PAGE_TOKEN_LEN + 1);
        assert_eq!(PageToken::decode(&long), Err(PageTokenError::TooLong { len: 1025 }));
        // At the limit the length check passes and decoding proceeds (and fails later for this content).
        let at_limit = "A".repeat(MAX_PAGE_TOKEN_LEN);
        assert_eq!(PageToken::decode(&at_limit), Err(PageTokenError::UnsupportedVersion(0)));
    }

    #[test]
    fn rejects_non_base64() {
        for garbage in ["!!!!", "AQ==", "AQ=", "a b", "AQ+/", "é", "A"] {
            assert_eq!(
                PageToken::decode(garbage),
                Err(PageTokenError::NotBase64),
                "{garbage:?}"
            );
        }
        // Non-canonical trailing bits: "AR" and "AQ" would both decode to [0x01] if allowed.
        assert_eq!(PageToken::decode("AR"), Err(PageTokenError::NotBase64));
    }

    #[test]
    fn rejects_wrong_version() {
        let mut bytes = raw(&sample());
        bytes[0] = 2;
        assert_eq!(decode_raw(&bytes), Err(PageTokenError::UnsupportedVersion(2)));
        assert!(
            PageTokenError::UnsupportedVersion(2)
                .to_string()
                .contains("start again from the first page")
        );
    }

    #[test]
    fn rejects_every_truncation() {
        let bytes = raw(&sample());
        for len in 1..bytes.len() {
            assert_eq!(
                decode_raw(&bytes[..len]),
                Err(PageTokenError::Truncated),
                "cut at {len}"
            );
        }
    }

    #[test]
    fn rejects_trailing_bytes() {
        let mut bytes = raw(&sample());
        bytes.extend_from_slice(&[0, 0]);
        assert_eq!(decode_raw(&bytes), Err(PageTokenError::TrailingBytes(2)));
    }

    #[test]
    fn rejects_unknown_tag() {
        let mut bytes = raw(&sample());
        bytes[2] = 9;
        assert_eq!(decode_raw(&bytes), Err(PageTokenError::UnknownPartTag(9)));
    }

    #[test]
    fn rejects_invalid_utf8() {
        let bytes = [VERSION, 1, TAG_TEXT, 2, 0xff, 0xfe, 0, 0, 0, 0, 0, 0, 0, 0];
        assert_eq!(decode_raw(&bytes), Err(PageTokenError::InvalidText));
    }

    #[test]
    fn rejects_bad_varints() {
        // Overlong encoding of 1.
        assert_eq!(decode_raw(&[VERSION, 0x81, 0x00]), Err(PageTokenError::InvalidLength));
        // More than 64 bits.
        let mut too_big = vec![VERSION];
        too_big.extend_from_slice(&[0xff; 9]);
        too_big.push(0x02);
        assert_eq!(decode_raw(&too_big), Err(PageTokenError::InvalidLength));
        // Eleven bytes.
        let mut too_many = vec![VERSION];
        too_many.extend_from_slice(&[0x80; 11]);
        assert_eq!(decode_raw(&too_many), Err(PageTokenError::InvalidLength));
    }

    #[test]
    fn rejects_forged_huge_lengths_without_allocating() {
        // A part count of u64::MAX.
        let mut huge_count = vec![VERSION];
        huge_count.extend_from_slice(&[0xff; 9]);
        huge_count.push(0x01);
        assert_eq!(decode_raw(&huge_count), Err(PageTokenError::Truncated));
        // A text length far beyond the input.
        let bytes = [VERSION, 1, TAG_TEXT, 0xff, 0xff, 0xff, 0xff, 0x0f];
        assert_eq!(decode_raw(&bytes), Err(PageTokenError::Truncated));
    }

    #[test]
    fn random_input_never_panics_and_accepted_tokens_are_canonical() {
        // xorshift64*: deterministic pseudo-random bytes without an extra dependency.
        let mut state = 0x2545_F491_4F6C_DD1Du64;
        let mut next = move || {
            state ^= state >> 12;
            state ^= state << 25;
            state ^= state >> 27;
            state.wrapping_mul(0x2545_F491_4F6C_DD1D)
        };
        let template = raw(&sample());
        let mut accepted = 0;
        for i in 0..20_000 {
            // Half fully random, half a valid token with a few bytes flipped, to reach deeper code paths.
            let bytes: Vec<u8> = if i % 2 == 0 {
                (0..next() % 48).map(|_| next() as u8).collect()
            } else {
                let mut b = template.clone();
                for _ in 0..1 + next() % 3 {
                    let at = (next() % b.len() as u64) as usize;
                    b[at] = next() as u8;
                }
                b
            };
            let encoded = URL_SAFE_NO_PAD.encode(&bytes);
            if let Ok(token) = PageToken::decode(&encoded) {
                accepted += 1;
                assert_eq!(token.encode(), encoded);
            }
        }
        assert!(accepted > 0);
    }

    #[test]
    fn filter_check() {
        let token = sample();
        assert_eq!(token.check_filter(filter_hash(&["parent=x", "app=web"])), Ok(()));
        assert_eq!(
            token.check_filter(filter_hash(&["parent=x", "app=db"])),
            Err(PageTokenError::FilterMismatch)
        );
    }

    #[test]
    fn errors_convert_to_page_token_violations() {
        let v = PageTokenError::Truncated.to_violation();
        assert_eq!(
            v,
            Violation::new("/page_token", "page token is not valid: it is truncated")
        );
    }

    #[test]
    fn fnv1a_known_vectors() {
        // Published FNV-1a 64-bit test vectors.
        assert_eq!(fnv1a(FNV_OFFSET_BASIS, b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(FNV_OFFSET_BASIS, b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(FNV_OFFSET_BASIS, b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn filter_hash_is_stable_and_unambiguous() {
        assert_eq!(filter_hash(&[]), FNV_OFFSET_BASIS);
        // Pinned: changing this invalidates every outstanding token.
        assert_eq!(filter_hash(&["parent=x", "app=web"]), PINNED_HASH);
        assert_ne!(filter_hash(&["ab", "c"]), filter_hash(&["a", "bc"]));
        assert_ne!(filter_hash(&["a"]), filter_hash(&["a", ""]));
        assert_ne!(filter_hash(&[""]), filter_hash(&[]));
        assert_ne!(filter_hash(&["a", "b"]), filter_hash(&["b", "a"]));
        assert_eq!(filter_hash(&["x", "y"]), filter_hash(&["x", "y"]));
    }

    // Cross-checked with an independent implementation (Python) of the same definition.
    const PINNED_HASH: u64 = 0x0fdd_9eb4_d4a5_5ba9;

    #[test]
    fn page_sizes() {
        assert_eq!(page_size(0), Ok(DEFAULT_PAGE_SIZE));
        assert_eq!(page_size(1), Ok(1));
        assert_eq!(page_size(250), Ok(250));
        assert_eq!(page_size(1000), Ok(1000));
        assert_eq!(page_size(1001), Ok(MAX_PAGE_SIZE));
        assert_eq!(page_size(i32::MAX), Ok(MAX_PAGE_SIZE));
        for n in [-1, i32::MIN] {
            let v = page_size(n).unwrap_err();
            assert_eq!(v.field, "/page_size");
            assert_eq!(
                v.description,
                format!("page_size must not be negative (got {n}); use 0 for the default of 100")
            );
        }
    }
}

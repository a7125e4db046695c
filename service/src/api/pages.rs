//! Page tokens of list methods: opaque keyset positions bound to the filters
//! they were issued for.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::contract::status::{ApiError, Reason};
use crate::domain::page_token::{PageToken, PositionPart};
use crate::domain::violation::Violation;

/// Decodes `token` (empty = first page) and checks it was issued for the
/// same filters; returns its position.
pub fn decode_token(token: &str, filters: u64) -> Result<Option<Vec<PositionPart>>, ApiError> {
    if token.is_empty() {
        return Ok(None);
    }
    let decoded = PageToken::decode(token).map_err(|e| invalid(e.to_violation()))?;
    decoded.check_filter(filters).map_err(|e| invalid(e.to_violation()))?;
    Ok(Some(decoded.position))
}

/// Encodes the position of the last item of a page.
fn encode_token(position: Vec<PositionPart>, filters: u64) -> String {
    PageToken {
        position,
        filter_hash: filters,
    }
    .encode()
}

/// A token whose position has the wrong shape for this list.
pub fn invalid_token(description: &str) -> ApiError {
    invalid(Violation::new("/page_token", description))
}

fn invalid(violation: Violation) -> ApiError {
    ApiError::violations(Reason::InvalidPageToken, vec![violation])
}

/// Trims a page fetched with one extra item to `limit` and returns the token
/// of the next page (empty when this is the last one).
pub fn finish_page<T>(
    page: &mut Vec<T>,
    limit: usize,
    filters: u64,
    position: impl Fn(&T) -> Vec<PositionPart>,
) -> String {
    if page.len() <= limit {
        return String::new();
    }
    page.truncate(limit);
    page.last()
        .map(|last| encode_token(position(last), filters))
        .unwrap_or_default()
}

/// Reads a (time, id) keyset position, the shape of newest-first lists.
pub fn time_and_id(position: &[PositionPart]) -> Result<(DateTime<Utc>, Uuid), ApiError> {
    match position {
        [PositionPart::Int(micros), PositionPart::Uuid(id)] => DateTime::from_timestamp_micros(*micros)
            .map(|time| (time, *id))
            .ok_or_else(|| invalid_token("holds an invalid time")),
        _ => Err(invalid_token("is not a position of this list")),
    }
}

/// The (time, id) keyset position of an item.
pub fn time_and_id_position(time: DateTime<Utc>, id: Uuid) -> Vec<PositionPart> {
    vec![PositionPart::Int(time.timestamp_micros()), PositionPart::Uuid(id)]
}

//! How a call names one resource: its kind and name checked, and the
//! refusal when no resource (the caller may see) has them.

use crate::contract::status::{ApiError, Reason};
use crate::domain::names::{validate_kind_name, validate_resource_name};

/// The refusal of a call about `kind/name` when it does not exist (or the
/// caller may not see it: the two answers are the same).
pub fn resource_not_found(kind: &str, name: &str) -> ApiError {
    ApiError::refused(Reason::ResourceNotFound, format!("{kind}/{name} does not exist"))
}

/// Checks the kind and name a call addresses a resource by.
pub fn check_key(kind: &str, name: &str) -> Result<(), ApiError> {
    let mut violations = Vec::new();
    violations.extend(validate_kind_name("/kind", kind).err());
    violations.extend(validate_resource_name("/name", name).err());
    if violations.is_empty() {
        Ok(())
    } else {
        Err(ApiError::violations(Reason::InvalidName, violations))
    }
}

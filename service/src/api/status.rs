//! The one place where errors become gRPC statuses (ARCHITECTURE §5.2).
//!
//! Every status carries exactly one `google.rpc.ErrorInfo` with domain
//! [`ERROR_DOMAIN`] and a stable UPPER_SNAKE reason (catalogued in
//! `docs/errors.md`), plus the details its code calls for.

use std::collections::HashMap;
use std::time::Duration;

use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt};

/// The `ErrorInfo.domain` of every converge error.
pub const ERROR_DOMAIN: &str = "converge.dev";

/// An error answered to an API caller.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The method exists in the contract but its capability is not built yet.
    #[error("{method} is not implemented yet: {capability}")]
    NotImplemented {
        /// Fully-qualified method name.
        method: &'static str,
        /// The missing capability.
        capability: &'static str,
    },
    /// The database cannot be reached; the caller should retry.
    #[error("the database is unavailable; retry shortly")]
    DatabaseUnavailable(#[source] sqlx::Error),
    /// The server is shutting down; the caller should retry on another pod.
    #[error("the server is shutting down")]
    ShuttingDown,
    /// A fault no caller can cause (a bug or a broken invariant).
    #[error("internal error")]
    Internal(String),
}

impl ApiError {
    /// The stable machine-readable reason.
    pub fn reason(&self) -> &'static str {
        match self {
            ApiError::NotImplemented { .. } => "NOT_IMPLEMENTED",
            ApiError::DatabaseUnavailable(_) => "DATABASE_UNAVAILABLE",
            ApiError::ShuttingDown => "SHUTTING_DOWN",
            ApiError::Internal(_) => "INTERNAL",
        }
    }

    /// The canonical status code.
    pub fn code(&self) -> Code {
        match self {
            ApiError::NotImplemented { .. } => Code::Unimplemented,
            ApiError::DatabaseUnavailable(_) | ApiError::ShuttingDown => Code::Unavailable,
            ApiError::Internal(_) => Code::Internal,
        }
    }

    fn metadata(&self) -> HashMap<String, String> {
        match self {
            ApiError::NotImplemented { method, capability } => HashMap::from([
                ("method".to_owned(), (*method).to_owned()),
                ("capability".to_owned(), (*capability).to_owned()),
            ]),
            _ => HashMap::new(),
        }
    }

    fn retry_after(&self) -> Option<Duration> {
        match self {
            ApiError::DatabaseUnavailable(_) => Some(Duration::from_secs(1)),
            ApiError::ShuttingDown => Some(Duration::from_millis(100)),
            _ => None,
        }
    }
}

impl From<sqlx::Error> for ApiError {
    fn from(error: sqlx::Error) -> Self {
        match &error {
            sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed | sqlx::Error::Io(_) | sqlx::Error::Tls(_) => {
                ApiError::DatabaseUnavailable(error)
            }
            // 57P01..57P03: admin shutdown, crash shutdown, cannot connect now;
            // 08xxx: connection exceptions.
            sqlx::Error::Database(db) if db.code().is_some_and(|c| c.starts_with("57P") || c.starts_with("08")) => {
                ApiError::DatabaseUnavailable(error)
            }
            _ => ApiError::Internal(error.to_string()),
        }
    }
}

impl From<ApiError> for Status {
    fn from(error: ApiError) -> Self {
        if let ApiError::Internal(detail) = &error {
            // The detail may name tables or values: log it, never send it.
            tracing::error!(detail, "internal error answered to a caller");
        }
        let mut details = ErrorDetails::with_error_info(error.reason(), ERROR_DOMAIN, error.metadata());
        if let Some(delay) = error.retry_after() {
            details.set_retry_info(Some(delay));
        }
        Status::with_error_details(error.code(), error.to_string(), details)
    }
}

/// The answer of a contract method whose capability is not built yet.
pub fn not_implemented(method: &'static str, capability: &'static str) -> Status {
    ApiError::NotImplemented { method, capability }.into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_status_carries_one_error_info() {
        let status = not_implemented("converge.v1.X/Y", "widgets");
        assert_eq!(status.code(), Code::Unimplemented);
        let details = status.get_error_details();
        let info = details.error_info().expect("error info");
        assert_eq!(info.reason, "NOT_IMPLEMENTED");
        assert_eq!(info.domain, ERROR_DOMAIN);
        assert_eq!(info.metadata.get("capability").map(String::as_str), Some("widgets"));
        assert!(status.message().contains("widgets"));
    }

    #[test]
    fn unavailable_database_says_when_to_retry() {
        let status: Status = ApiError::from(sqlx::Error::PoolTimedOut).into();
        assert_eq!(status.code(), Code::Unavailable);
        let details = status.get_error_details();
        assert_eq!(
            details.error_info().map(|i| i.reason.as_str()),
            Some("DATABASE_UNAVAILABLE")
        );
        assert!(details.retry_info().and_then(|r| r.retry_delay).is_some());
    }

    #[test]
    fn internal_details_stay_on_the_server() {
        let status: Status = ApiError::Internal("relation secret_table".into()).into();
        assert_eq!(status.code(), Code::Internal);
        assert!(!status.message().contains("secret_table"));
    }
}

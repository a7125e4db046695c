//! The one place where errors become gRPC statuses (catalogue: `docs/errors.md`).
//!
//! Every status carries exactly one `google.rpc.ErrorInfo` with domain
//! [`ERROR_DOMAIN`] and a stable UPPER_SNAKE reason (catalogued in
//! `docs/errors.md`), plus the details its code calls for: `BadRequest`
//! field violations (JSON pointers into the request) for invalid input,
//! `PreconditionFailure` violations for refused state changes, `RetryInfo`
//! for transient unavailability.

use std::collections::HashMap;
use std::time::Duration;

use tonic::{Code, Status};
use tonic_types::{ErrorDetails, FieldViolation, PreconditionViolation, StatusExt};

use crate::catalog::CatalogError;
use crate::db::replica::Unreachable;
use crate::domain::violation::{Violation, clip};
use crate::store::StoreError;
use crate::store::retry::Retryable;

/// The `ErrorInfo.domain` of every converge error.
pub const ERROR_DOMAIN: &str = "converge.dev";

/// Declares [`Reason`] with its stable string, and [`Reason::ALL`], from one
/// list: a reason cannot be added without its string or left out of `ALL`.
macro_rules! reasons {
    ($($(#[$doc:meta])* $name:ident => $text:literal,)*) => {
        /// Why a request was refused. Each reason has exactly one status code.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Reason {
            $($(#[$doc])* $name,)*
        }

        impl Reason {
            /// Every reason the server can send, in catalogue order.
            pub const ALL: &[Reason] = &[$(Reason::$name,)*];

            /// The stable machine-readable reason.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Reason::$name => $text,)*
                }
            }
        }
    };
}

reasons! {
    /// A required field is missing or a field has a malformed value.
    InvalidField => "INVALID_FIELD",
    /// A resource or kind name is malformed.
    InvalidName => "INVALID_NAME",
    /// Labels are malformed or too many.
    InvalidLabels => "INVALID_LABELS",
    /// A label selector does not parse.
    InvalidLabelSelector => "INVALID_LABEL_SELECTOR",
    /// A page token is malformed or was issued for other filters.
    InvalidPageToken => "INVALID_PAGE_TOKEN",
    /// A kind manifest breaks a rule (names, reactions, policy, schemas).
    InvalidKindManifest => "INVALID_KIND_MANIFEST",
    /// A kind config value or update mask is invalid.
    InvalidKindConfig => "INVALID_KIND_CONFIG",
    /// A spec does not satisfy its kind's spec schema.
    SpecSchemaViolation => "SPEC_SCHEMA_VIOLATION",
    /// A request id was reused with a different request.
    RequestIdReused => "REQUEST_ID_REUSED",
    /// A value nests objects and arrays deeper than the documented limit.
    NestingTooDeep => "NESTING_TOO_DEEP",
    /// The request is not a well-formed protobuf message of its method.
    MalformedRequest => "MALFORMED_REQUEST",
    /// No manifest for the kind version.
    KindNotFound => "KIND_NOT_FOUND",
    /// No such resource.
    ResourceNotFound => "RESOURCE_NOT_FOUND",
    /// No such provider config.
    ProviderConfigNotFound => "PROVIDER_CONFIG_NOT_FOUND",
    /// The pair already has another default provider config.
    DefaultConfigExists => "DEFAULT_CONFIG_EXISTS",
    /// A provider config spec does not satisfy its kind's config schema.
    ConfigSchemaViolation => "CONFIG_SCHEMA_VIOLATION",
    /// Resources still reference the provider config.
    ProviderConfigInUse => "PROVIDER_CONFIG_IN_USE",
    /// The provider config was emitted by a composer; it belongs to it.
    ProviderConfigOwned => "PROVIDER_CONFIG_OWNED",
    /// The provider config is for another kind or kind version than the resource.
    ProviderConfigKindMismatch => "PROVIDER_CONFIG_KIND_MISMATCH",
    /// A new config schema would reject provider configs already stored.
    SchemaRejectsExistingConfigs => "SCHEMA_REJECTS_EXISTING_CONFIGS",
    /// A provider config's data bundle is larger than allowed.
    ConfigDataTooLarge => "CONFIG_DATA_TOO_LARGE",
    /// No such reactor binding.
    ReactorBindingNotFound => "REACTOR_BINDING_NOT_FOUND",
    /// No such reactor delivery (never recorded, delivered, or swept).
    ReactorDeliveryNotFound => "REACTOR_DELIVERY_NOT_FOUND",
    /// A redrive names a delivery that has not given up.
    DeliveryNotGivenUp => "DELIVERY_NOT_GIVEN_UP",
    /// The resource has no retained revision at that generation.
    RevisionNotFound => "REVISION_NOT_FOUND",
    /// No such operation (never invoked, or past the retention window).
    OperationNotFound => "OPERATION_NOT_FOUND",
    /// The resource's kind declares no operation reaction for the verb.
    UnknownVerb => "UNKNOWN_VERB",
    /// An operation's input is too large or rejected by its verb's input schema.
    InvalidOperationInput => "INVALID_OPERATION_INPUT",
    /// A binding names a reactor kind that is not one (no REACTOR reaction),
    /// or watches a reactor kind (which has no resources).
    NotAReactor => "NOT_A_REACTOR",
    /// A resource of a reactor kind: reactor kinds own no resources.
    KindIsReactor => "KIND_IS_REACTOR",
    /// The name is held by another resource (possibly one being deleted).
    NameTaken => "NAME_TAKEN",
    /// The resource is being deleted and accepts no writes.
    DeletionPending => "DELETION_PENDING",
    /// The resource was composed by another; its spec belongs to the composer.
    ResourceOwned => "RESOURCE_OWNED",
    /// An operator action does not apply to the resource in its current state.
    ActionNotApplicable => "ACTION_NOT_APPLICABLE",
    /// The kind version is retired: no new resources or flips.
    KindVersionRetired => "KIND_VERSION_RETIRED",
    /// The kind version still has resources.
    KindInUse => "KIND_IN_USE",
    /// The target manifest of a kind migration declares no conversion from
    /// its source version.
    ConversionNotDeclared => "CONVERSION_NOT_DECLARED",
    /// Another migration of the kind is running.
    MigrationInProgress => "MIGRATION_IN_PROGRESS",
    /// No such kind migration.
    MigrationNotFound => "MIGRATION_NOT_FOUND",
    /// No connected composer worker took a plan's compose.
    ComposerUnavailable => "COMPOSER_UNAVAILABLE",
    /// A composer worker took a plan's compose and did not answer in time.
    ComposerTimedOut => "COMPOSER_TIMED_OUT",
    /// A new spec schema would reject specs already stored.
    SchemaRejectsExistingResources => "SCHEMA_REJECTS_EXISTING_RESOURCES",
    /// The etag does not match the stored one.
    EtagMismatch => "ETAG_MISMATCH",
    /// A watch position is older than the retained change log.
    ResourceVersionTooOld => "RESOURCE_VERSION_TOO_OLD",
    /// A watch position is ahead of the change log.
    ResourceVersionTooNew => "RESOURCE_VERSION_TOO_NEW",
    /// A watcher read too slowly and was cut off.
    WatchTooSlow => "WATCH_TOO_SLOW",
    /// A watch could not read the change log.
    WatchUnavailable => "WATCH_UNAVAILABLE",
    /// The spec is larger than allowed.
    SpecTooLarge => "SPEC_TOO_LARGE",
    /// The request message is larger than the transport limit.
    RequestTooLarge => "REQUEST_TOO_LARGE",
    /// The database aborted the transaction to resolve a conflict with a
    /// concurrent one; retrying is safe.
    ConcurrentModification => "CONCURRENT_MODIFICATION",
    /// PostgreSQL is unreachable.
    DatabaseUnavailable => "DATABASE_UNAVAILABLE",
    /// The caller's workload identity is not on the allowlist of the
    /// service it called.
    IdentityNotAllowed => "IDENTITY_NOT_ALLOWED",
    /// The authorization policy grants the caller no permission for the
    /// call (ErrorInfo metadata: `permission`, `target`).
    NotAuthorized => "NOT_AUTHORIZED",
    /// The server is draining.
    ShuttingDown => "SHUTTING_DOWN",
    /// A fault no caller can cause.
    Internal => "INTERNAL",
}

impl Reason {
    /// The canonical status code.
    pub fn code(self) -> Code {
        match self {
            Reason::InvalidField
            | Reason::InvalidName
            | Reason::InvalidLabels
            | Reason::InvalidLabelSelector
            | Reason::InvalidPageToken
            | Reason::InvalidKindManifest
            | Reason::InvalidKindConfig
            | Reason::SpecSchemaViolation
            | Reason::ConfigSchemaViolation
            | Reason::ProviderConfigKindMismatch
            | Reason::NotAReactor
            | Reason::UnknownVerb
            | Reason::InvalidOperationInput
            | Reason::RequestIdReused
            | Reason::NestingTooDeep
            | Reason::MalformedRequest => Code::InvalidArgument,
            Reason::KindNotFound
            | Reason::ResourceNotFound
            | Reason::ProviderConfigNotFound
            | Reason::ReactorBindingNotFound
            | Reason::ReactorDeliveryNotFound
            | Reason::RevisionNotFound
            | Reason::OperationNotFound
            | Reason::MigrationNotFound => Code::NotFound,
            Reason::NameTaken | Reason::DefaultConfigExists => Code::AlreadyExists,
            Reason::DeletionPending
            | Reason::ResourceOwned
            | Reason::ActionNotApplicable
            | Reason::KindVersionRetired
            | Reason::KindInUse
            | Reason::ProviderConfigInUse
            | Reason::ProviderConfigOwned
            | Reason::KindIsReactor
            | Reason::DeliveryNotGivenUp
            | Reason::ConversionNotDeclared
            | Reason::SchemaRejectsExistingResources
            | Reason::SchemaRejectsExistingConfigs => Code::FailedPrecondition,
            Reason::EtagMismatch | Reason::ConcurrentModification | Reason::MigrationInProgress => Code::Aborted,
            Reason::SpecTooLarge | Reason::ConfigDataTooLarge | Reason::RequestTooLarge | Reason::WatchTooSlow => {
                Code::ResourceExhausted
            }
            Reason::ResourceVersionTooOld | Reason::ResourceVersionTooNew => Code::OutOfRange,
            Reason::DatabaseUnavailable
            | Reason::ShuttingDown
            | Reason::WatchUnavailable
            | Reason::ComposerUnavailable => Code::Unavailable,
            Reason::ComposerTimedOut => Code::DeadlineExceeded,
            Reason::IdentityNotAllowed | Reason::NotAuthorized => Code::PermissionDenied,
            Reason::Internal => Code::Internal,
        }
    }
}

/// An error answered to an API caller.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The request was refused for `reason`.
    #[error("{message}")]
    Refused {
        /// Why.
        reason: Reason,
        /// Human-readable summary.
        message: String,
        /// The offending fields (invalid input) or state (preconditions).
        violations: Vec<Violation>,
    },
    /// The database cannot be reached; the caller should retry.
    #[error("the database is unavailable; retry shortly")]
    DatabaseUnavailable(#[source] sqlx::Error),
    /// The server's health probe counts the database as unreachable, so the
    /// call was refused without trying it; the caller should retry.
    #[error("the database does not answer the server's health checks; retry shortly")]
    DatabaseDown,
    /// The server is shutting down; the caller should retry on another pod.
    #[error("the server is shutting down")]
    ShuttingDown,
    /// The authorization policy does not grant `permission` on `target`.
    #[error("not authorized: {permission} on {target}")]
    NotAuthorized {
        /// The verb (`apply`, `serve`, `read`, …).
        permission: String,
        /// What it was asked on: `kind/name`, a kind, or an object.
        target: String,
    },
    /// A fault no caller can cause (a bug or a broken invariant).
    #[error("internal error")]
    Internal(String),
}

impl ApiError {
    /// A refusal without field details.
    pub fn refused(reason: Reason, message: impl Into<String>) -> Self {
        ApiError::Refused {
            reason,
            message: message.into(),
            violations: Vec::new(),
        }
    }

    /// A refusal naming the offending fields; the message summarises them.
    pub fn violations(reason: Reason, violations: Vec<Violation>) -> Self {
        let message = summarize(&violations);
        ApiError::Refused {
            reason,
            message,
            violations,
        }
    }

    /// The same refusal about one item of a batch: field paths move under
    /// `prefix` (e.g. `/requests/3`), and a refusal that named no field
    /// names the item. Other errors are not about the item and pass through.
    pub fn within(self, prefix: &str) -> Self {
        match self {
            ApiError::Refused {
                reason,
                message,
                violations,
            } => {
                let violations = if violations.is_empty() {
                    vec![Violation::new(prefix, message.clone())]
                } else {
                    violations
                        .into_iter()
                        .map(|v| Violation::new(format!("{prefix}{}", v.field), v.description))
                        .collect()
                };
                ApiError::Refused {
                    reason,
                    message: format!("{prefix}: {message}"),
                    violations,
                }
            }
            other => other,
        }
    }

    /// The stable machine-readable reason.
    pub fn reason(&self) -> Reason {
        match self {
            ApiError::Refused { reason, .. } => *reason,
            ApiError::DatabaseUnavailable(_) | ApiError::DatabaseDown => Reason::DatabaseUnavailable,
            ApiError::ShuttingDown => Reason::ShuttingDown,
            ApiError::NotAuthorized { .. } => Reason::NotAuthorized,
            ApiError::Internal(_) => Reason::Internal,
        }
    }

    fn retry_after(&self) -> Option<Duration> {
        match self {
            ApiError::DatabaseUnavailable(_) | ApiError::DatabaseDown => Some(Duration::from_secs(1)),
            ApiError::Refused {
                reason: Reason::WatchUnavailable | Reason::ComposerUnavailable,
                ..
            } => Some(Duration::from_secs(1)),
            ApiError::ShuttingDown => Some(Duration::from_millis(100)),
            _ => None,
        }
    }
}

/// One line naming the first violations.
/// The message of a refusal for `violations`: the first three, then how
/// many more.
pub fn summarize(violations: &[Violation]) -> String {
    const SHOWN: usize = 3;
    let mut parts: Vec<String> = violations
        .iter()
        .take(SHOWN)
        .map(|v| {
            if v.field.is_empty() {
                v.description.clone()
            } else {
                format!("{}: {}", v.field, v.description)
            }
        })
        .collect();
    if violations.len() > SHOWN {
        parts.push(format!("and {} more", violations.len() - SHOWN));
    }
    if parts.is_empty() {
        "the request is invalid".to_owned()
    } else {
        parts.join("; ")
    }
}

impl From<Violation> for ApiError {
    fn from(violation: Violation) -> Self {
        ApiError::violations(Reason::InvalidField, vec![violation])
    }
}

/// The API's view of a store failure: the one mapping of [`StoreError`]
/// onto the catalogue. SQLSTATEs are read by the store, never here.
impl From<StoreError> for ApiError {
    fn from(error: StoreError) -> Self {
        match error {
            StoreError::Unavailable(e) => ApiError::DatabaseUnavailable(e),
            StoreError::Conflict(_) => ApiError::refused(
                Reason::ConcurrentModification,
                "the write conflicted with a concurrent one; retry it",
            ),
            // Every request field is checked before it gets here; this keeps
            // a field that was missed a caller error, not an INTERNAL one.
            StoreError::Unstorable(_) => ApiError::refused(
                Reason::InvalidField,
                "the request holds a character the database cannot store (U+0000)",
            ),
            // The API runs no SQL function that refuses; one that did would be a bug.
            refused @ StoreError::Refused { .. } => ApiError::Internal(refused.to_string()),
            StoreError::Other(e) => ApiError::Internal(e.to_string()),
        }
    }
}

/// A compiled manifest the API asked the catalog for: a database failure
/// keeps its own status (UNAVAILABLE stays UNAVAILABLE); a manifest deleted
/// between the lock and the load is a conflict to retry; one that no longer
/// compiles is a bug.
impl From<CatalogError> for ApiError {
    fn from(error: CatalogError) -> Self {
        match error {
            CatalogError::Database(e) => e.into(),
            CatalogError::Missing { .. } => ApiError::refused(
                Reason::ConcurrentModification,
                "the kind's manifest changed while the request ran; retry it",
            ),
            invalid @ CatalogError::Invalid { .. } => ApiError::Internal(invalid.to_string()),
        }
    }
}

/// A statement the API ran itself (begin, commit): classified by the store.
impl From<sqlx::Error> for ApiError {
    fn from(error: sqlx::Error) -> Self {
        StoreError::from(error).into()
    }
}

/// A write transaction runs again when the database aborted it to resolve a
/// conflict (the store's [`StoreError::Conflict`], or a conflict the API
/// itself detected), never for any other refusal.
impl Retryable for ApiError {
    fn is_retryable(&self) -> bool {
        self.reason() == Reason::ConcurrentModification
    }
}

/// A read the replica could not serve for want of a connection may run on
/// the primary instead.
impl Unreachable for ApiError {
    fn is_unreachable(&self) -> bool {
        matches!(self, ApiError::DatabaseUnavailable(_))
    }
}

/// Longest status message sent, in bytes.
const MAX_MESSAGE_BYTES: usize = 512;

/// Most violations one status lists, and the bytes of text they may carry
/// together; the rest are counted in a last entry. With the message bound,
/// this keeps every status (message, ErrorInfo and details, base64-encoded
/// in the trailers) well under 8 KiB, below the 16 KiB metadata limit that
/// common clients enforce.
const MAX_VIOLATIONS: usize = 20;
const MAX_VIOLATION_BYTES: usize = 2048;

/// The violations a status lists: within [`MAX_VIOLATIONS`] and
/// [`MAX_VIOLATION_BYTES`], the rest counted in a last field-less entry.
fn bounded(violations: &[Violation]) -> Vec<Violation> {
    let mut shown = Vec::new();
    let mut bytes = 0;
    for v in violations {
        bytes += v.field.len() + v.description.len();
        if shown.len() == MAX_VIOLATIONS || bytes > MAX_VIOLATION_BYTES {
            break;
        }
        shown.push(v.clone());
    }
    if shown.len() < violations.len() {
        let more = violations.len() - shown.len();
        shown.push(Violation::new("", format!("and {more} more")));
    }
    shown
}

impl From<ApiError> for Status {
    fn from(error: ApiError) -> Self {
        if let ApiError::Internal(detail) = &error {
            // The detail may name tables or values: log it, never send it.
            tracing::error!(detail, "internal error answered to a caller");
        }
        let reason = error.reason();
        let metadata = match &error {
            ApiError::NotAuthorized { permission, target } => HashMap::from([
                ("permission".to_owned(), permission.clone()),
                ("target".to_owned(), target.clone()),
            ]),
            _ => HashMap::new(),
        };
        let mut details = ErrorDetails::with_error_info(reason.as_str(), ERROR_DOMAIN, metadata);
        if let Some(delay) = error.retry_after() {
            details.set_retry_info(Some(delay));
        }
        if let ApiError::Refused { violations, .. } = &error
            && !violations.is_empty()
        {
            let violations = bounded(violations);
            match reason.code() {
                Code::FailedPrecondition => {
                    details.set_precondition_failure(
                        violations
                            .into_iter()
                            .map(|v| PreconditionViolation::new(reason.as_str(), v.field, v.description))
                            .collect::<Vec<_>>(),
                    );
                }
                _ => {
                    details.set_bad_request(
                        violations
                            .into_iter()
                            .map(|v| FieldViolation::new(v.field, v.description))
                            .collect::<Vec<_>>(),
                    );
                }
            }
        }
        Status::with_error_details(reason.code(), clip(error.to_string(), MAX_MESSAGE_BYTES), details)
    }
}

/// The prefix of tonic-prost's message for a message that does not decode.
pub const TONIC_UNDECODABLE: &str = "failed to decode Protobuf message";

/// What prost says when a message nests past its recursion limit.
const PROST_TOO_DEEP: &str = "recursion limit reached";

/// The refusal of a request that did not decode, from the decoder's message.
pub fn undecodable(message: &str) -> ApiError {
    if message.contains(PROST_TOO_DEEP) {
        ApiError::refused(
            Reason::NestingTooDeep,
            format!(
                "the request nests values deeper than the protobuf decoder allows; objects and arrays may nest at most {} levels",
                converge_proto::json::MAX_DEPTH
            ),
        )
    } else {
        ApiError::refused(
            Reason::MalformedRequest,
            "the request is not a valid protobuf message of this method",
        )
    }
}

/// Whether a status a stream yielded is the decoder's refusal of a message.
pub fn is_undecodable(status: &tonic::Status) -> bool {
    status.code() == tonic::Code::Internal && status.message().starts_with(TONIC_UNDECODABLE)
}

/// The canonical name of a status code (one definition, in the telemetry
/// layer below this one, which labels metrics and spans with it).
pub use crate::telemetry::rpc::code_name;

#[cfg(test)]
mod tests {
    use super::*;

    /// The reason rows of the catalogue: (reason, code, line). A table row's
    /// code is its `code` column, or else the code its section names in
    /// parentheses ("## Not found (NOT_FOUND)").
    fn catalogue_rows(text: &str) -> Vec<(String, String, usize)> {
        let mut rows = Vec::new();
        let mut section_code = None;
        let mut code_column = None;
        for (i, line) in text.lines().enumerate() {
            let line_no = i + 1;
            if let Some(heading) = line.strip_prefix("## ") {
                section_code = heading
                    .split_once('(')
                    .and_then(|(_, rest)| rest.split_once(')'))
                    .map(|(code, _)| code.trim().to_owned());
                code_column = None;
                continue;
            }
            let Some(row) = line.trim().strip_prefix('|') else {
                continue;
            };
            let cells: Vec<&str> = row.trim_end_matches('|').split('|').map(str::trim).collect();
            if cells.first() == Some(&"reason") {
                code_column = cells.iter().position(|c| *c == "code");
                continue;
            }
            if cells.iter().all(|c| c.chars().all(|ch| ch == '-' || ch == ':')) {
                continue;
            }
            let reason = cells[0].trim_matches('`').to_owned();
            let code = match code_column {
                Some(column) => cells.get(column).map(|c| c.to_string()).unwrap_or_default(),
                None => section_code.clone().unwrap_or_default(),
            };
            rows.push((reason, code, line_no));
        }
        rows
    }

    /// docs/errors.md has one row per reason the server can send, with its
    /// code, and no row for a reason that does not exist.
    #[test]
    fn the_catalogue_documents_every_reason_and_only_those() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/errors.md");
        let text = std::fs::read_to_string(&path).expect("docs/errors.md");
        let rows = catalogue_rows(&text);
        let mut problems = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for (name, code, line) in &rows {
            match Reason::ALL.iter().find(|r| r.as_str() == name) {
                None => problems.push(format!("errors.md:{line}: `{name}` is not a reason the server sends")),
                Some(reason) => {
                    if !seen.insert(*reason) {
                        problems.push(format!("errors.md:{line}: `{name}` has a second row"));
                    }
                    let want = code_name(reason.code());
                    if code != want {
                        problems.push(format!(
                            "errors.md:{line}: `{name}` is documented as {code:?}, but is {want}"
                        ));
                    }
                }
            }
        }
        for reason in Reason::ALL {
            if !seen.contains(reason) {
                problems.push(format!("`{}` has no row in docs/errors.md", reason.as_str()));
            }
        }
        assert!(problems.is_empty(), "{}", problems.join("\n"));
    }

    /// The proto enum `converge.v1.ErrorReason` (proto/converge/v1/error_reason.proto),
    /// which the SDKs import, lists exactly the reasons the server sends: a
    /// value per reason, named `ERROR_REASON_` + the reason, and no other
    /// value than `ERROR_REASON_UNSPECIFIED`. Each value's comment opens with
    /// the reason's status code.
    #[test]
    fn the_proto_enum_lists_every_reason_and_only_those() {
        use prost::Message;
        let set = prost_types::FileDescriptorSet::decode(converge_proto::FILE_DESCRIPTOR_SET).expect("descriptor set");
        let values: Vec<(String, i32)> = set
            .file
            .iter()
            .filter(|f| f.package() == "converge.v1")
            .flat_map(|f| &f.enum_type)
            .filter(|e| e.name() == "ErrorReason")
            .flat_map(|e| &e.value)
            .map(|v| (v.name().to_owned(), v.number()))
            .collect();
        assert!(
            values
                .iter()
                .any(|(name, n)| name == "ERROR_REASON_UNSPECIFIED" && *n == 0),
            "converge.v1.ErrorReason is in the contract and opens with ERROR_REASON_UNSPECIFIED = 0: {values:?}"
        );
        let mut problems = Vec::new();
        for (name, _) in &values {
            let Some(reason) = name.strip_prefix("ERROR_REASON_") else {
                problems.push(format!("ErrorReason value {name} lacks the ERROR_REASON_ prefix"));
                continue;
            };
            if reason != "UNSPECIFIED" && !Reason::ALL.iter().any(|r| r.as_str() == reason) {
                problems.push(format!(
                    "ErrorReason value {name} is not a reason the server sends (Reason)"
                ));
            }
        }
        let source = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../proto/converge/v1/error_reason.proto"),
        )
        .expect("proto/converge/v1/error_reason.proto");
        for reason in Reason::ALL {
            let name = format!("ERROR_REASON_{}", reason.as_str());
            if !values.iter().any(|(value, _)| *value == name) {
                problems.push(format!(
                    "Reason `{}` has no value {name} in converge.v1.ErrorReason",
                    reason.as_str()
                ));
                continue;
            }
            // The comment just above the value opens with its code.
            let above: Vec<&str> = source
                .lines()
                .take_while(|line| !line.trim_start().starts_with(&format!("{name} =")))
                .collect();
            let comment_start = above
                .iter()
                .rev()
                .take_while(|line| line.trim_start().starts_with("//"))
                .last()
                .map(|line| line.trim_start().trim_start_matches("//").trim());
            let want = code_name(reason.code());
            if !comment_start.is_some_and(|c| c.starts_with(&format!("{want},"))) {
                problems.push(format!(
                    "the comment of {name} should open with \"{want},\": {comment_start:?}"
                ));
            }
        }
        assert!(problems.is_empty(), "{}", problems.join("\n"));
    }

    #[test]
    fn catalogue_rows_take_codes_from_columns_or_headings() {
        let rows = catalogue_rows(
            "## Not found (NOT_FOUND)\n\n| reason | when |\n|---|---|\n| `KIND_NOT_FOUND` | x |\n\n\
             ## Conflicts\n\n| reason | code | when |\n|---|---|---|\n| `NO_SUCH_REASON` | ABORTED | y |\n",
        );
        assert_eq!(
            rows,
            [
                ("KIND_NOT_FOUND".to_owned(), "NOT_FOUND".to_owned(), 5),
                ("NO_SUCH_REASON".to_owned(), "ABORTED".to_owned(), 11),
            ]
        );
    }

    #[test]
    fn reasons_are_listed_once_with_distinct_names() {
        let names: std::collections::HashSet<&str> = Reason::ALL.iter().map(|r| r.as_str()).collect();
        assert_eq!(names.len(), Reason::ALL.len());
    }

    #[test]
    fn every_status_carries_one_error_info() {
        let status: Status = ApiError::refused(Reason::UnknownVerb, "kind \"db\" declares no operation \"x\"").into();
        assert_eq!(status.code(), Code::InvalidArgument);
        let details = status.get_error_details();
        let info = details.error_info().expect("error info");
        assert_eq!(info.reason, "UNKNOWN_VERB");
        assert_eq!(info.domain, ERROR_DOMAIN);
        assert!(status.message().contains("declares no operation"));
    }

    #[test]
    fn unavailable_database_says_when_to_retry() {
        for error in [ApiError::from(sqlx::Error::PoolTimedOut), ApiError::DatabaseDown] {
            let status: Status = error.into();
            assert_eq!(status.code(), Code::Unavailable);
            let details = status.get_error_details();
            assert_eq!(
                details.error_info().map(|i| i.reason.as_str()),
                Some("DATABASE_UNAVAILABLE")
            );
            assert!(details.retry_info().and_then(|r| r.retry_delay).is_some());
        }
    }

    #[test]
    fn internal_details_stay_on_the_server() {
        let status: Status = ApiError::Internal("relation secret_table".into()).into();
        assert_eq!(status.code(), Code::Internal);
        assert!(!status.message().contains("secret_table"));
    }

    #[test]
    fn invalid_input_lists_field_violations() {
        let status: Status = ApiError::violations(
            Reason::SpecSchemaViolation,
            vec![
                Violation::new("/spec/port", "must be an integer"),
                Violation::new("/spec/name", "is required"),
            ],
        )
        .into();
        assert_eq!(status.code(), Code::InvalidArgument);
        let details = status.get_error_details();
        let fields: Vec<&str> = details
            .bad_request()
            .map(|b| b.field_violations.iter().map(|v| v.field.as_str()).collect())
            .unwrap_or_default();
        assert_eq!(fields, ["/spec/port", "/spec/name"]);
        assert!(status.message().contains("/spec/port: must be an integer"));
    }

    #[test]
    fn statuses_stay_small_whatever_they_echo() {
        let key = "k".repeat(10_000);
        let violations = (0..500)
            .map(|i| Violation::new(format!("/labels/{key}{i}"), format!("label key {key} is invalid")))
            .collect();
        let status: Status = ApiError::violations(Reason::InvalidLabels, violations).into();
        assert!(status.message().len() <= MAX_MESSAGE_BYTES);
        assert!(
            status.details().len() < 6 * 1024,
            "{} bytes of details",
            status.details().len()
        );
        let details = status.get_error_details();
        let listed = details.bad_request().map(|b| b.field_violations.len()).unwrap_or(0);
        assert!((2..=MAX_VIOLATIONS + 1).contains(&listed), "{listed}");
    }

    #[test]
    fn refused_preconditions_use_precondition_failure() {
        let status: Status = ApiError::violations(
            Reason::SchemaRejectsExistingResources,
            vec![Violation::new("vpc/a", "/spec/cidr: is required")],
        )
        .into();
        assert_eq!(status.code(), Code::FailedPrecondition);
        let details = status.get_error_details();
        assert_eq!(details.precondition_failure().map(|p| p.violations.len()), Some(1));
        assert!(details.bad_request().is_none());
    }
}

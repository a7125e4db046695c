//! What a client command reports when it fails, and the exit code scripts
//! read from it (listed in every `--help` and in docs/cli.md).

use std::fmt::Write as _;

use converge_service::contract::status::code_name;
use tonic::Code;
use tonic_types::StatusExt as _;

/// Any other failure.
pub const EXIT_FAILURE: u8 = 1;
/// Invalid input: flags, files, or a request the server refused as invalid.
/// The same code clap uses for a bad command line.
pub const EXIT_INVALID: u8 = 2;
/// The object (or its kind) does not exist.
pub const EXIT_NOT_FOUND: u8 = 3;
/// The server cannot be reached or is unavailable.
pub const EXIT_UNAVAILABLE: u8 = 4;
/// A wait (`delete --wait`, `invoke --wait`) ran out of time.
pub const EXIT_TIMEOUT: u8 = 5;
/// `plan` or `diff`: something would change.
pub const EXIT_CHANGES: u8 = 6;

/// Why a client command failed.
#[derive(Debug)]
pub enum CliError {
    /// The server answered with an error status.
    Status(tonic::Status),
    /// The input is wrong: a flag, a file, a document.
    Invalid(String),
    /// Something named does not exist (found out on the client side).
    NotFound(String),
    /// The server cannot be reached.
    Unavailable(String),
    /// A wait ran out of time.
    Timeout(String),
    /// Anything else.
    Failed(String),
    /// Stdout was closed by its reader (`| head`): the command ends
    /// quietly, with success.
    StdoutClosed,
    /// `plan` or `diff` found changes (printed already): not a failure,
    /// but scripts tell it from "nothing would change" by the exit code.
    ChangesPlanned,
}

impl From<tonic::Status> for CliError {
    fn from(status: tonic::Status) -> Self {
        Self::Status(status)
    }
}

impl CliError {
    /// The process exit code for this failure.
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Status(status) if broken_connection(status) => EXIT_UNAVAILABLE,
            CliError::Status(status) => match status.code() {
                Code::NotFound => EXIT_NOT_FOUND,
                Code::InvalidArgument | Code::OutOfRange => EXIT_INVALID,
                Code::Unavailable => EXIT_UNAVAILABLE,
                Code::DeadlineExceeded => EXIT_TIMEOUT,
                _ => EXIT_FAILURE,
            },
            CliError::Invalid(_) => EXIT_INVALID,
            CliError::NotFound(_) => EXIT_NOT_FOUND,
            CliError::Unavailable(_) => EXIT_UNAVAILABLE,
            CliError::Timeout(_) => EXIT_TIMEOUT,
            CliError::Failed(_) => EXIT_FAILURE,
            CliError::StdoutClosed => 0,
            CliError::ChangesPlanned => EXIT_CHANGES,
        }
    }

    /// The lines printed on stderr: the message, then (for a server error)
    /// the `ErrorInfo` reason and each field violation, one per line.
    pub fn render(&self) -> String {
        match self {
            CliError::Status(status) => render_status(status),
            CliError::Invalid(m) => format!("converge: invalid input: {m}\n"),
            CliError::NotFound(m) => format!("converge: not found: {m}\n"),
            CliError::Unavailable(m) => format!("converge: unavailable: {m}\n"),
            CliError::Timeout(m) => format!("converge: timed out: {m}\n"),
            CliError::Failed(m) => format!("converge: {m}\n"),
            CliError::StdoutClosed | CliError::ChangesPlanned => String::new(),
        }
    }
}

/// Whether the status was made on this side from a failed connection (a
/// refused TLS handshake, a reset stream, a peer that does not speak
/// HTTP/2 or TLS as asked) rather than sent by a server:
/// tonic keeps the transport error as its source.
fn broken_connection(status: &tonic::Status) -> bool {
    use std::error::Error as _;
    status.source().is_some()
        && matches!(
            status.code(),
            Code::Cancelled | Code::Unknown | Code::Unavailable | Code::Internal
        )
}

/// Whether the status is this side's `--request-timeout` running out (the
/// channel's timeout layer), not an answer of the server.
fn local_timeout(status: &tonic::Status) -> bool {
    use std::error::Error as _;
    let mut source = status.source();
    while let Some(cause) = source {
        if cause.is::<tonic::TimeoutExpired>() {
            return true;
        }
        source = cause.source();
    }
    false
}

/// `converge: CODE: message`, then `  reason: R` and one
/// `  field F: description` line per violation from the status details.
fn render_status(status: &tonic::Status) -> String {
    if local_timeout(status) {
        return "converge: unavailable: the server did not answer within the request timeout \
                (--request-timeout, CONVERGE_REQUEST_TIMEOUT)\n"
            .to_owned();
    }
    if broken_connection(status) {
        return format!("converge: unavailable: the connection failed: {}\n", status.message());
    }
    let mut out = format!("converge: {}: {}\n", code_name(status.code()), status.message());
    let details = status.get_error_details();
    if let Some(info) = details.error_info() {
        let _ = writeln!(out, "  reason: {}", info.reason);
    }
    if let Some(bad) = details.bad_request() {
        for v in &bad.field_violations {
            let _ = writeln!(out, "  field {}: {}", v.field, v.description);
        }
    }
    if let Some(pre) = details.precondition_failure() {
        for v in &pre.violations {
            let _ = writeln!(out, "  precondition {} {}: {}", v.r#type, v.subject, v.description);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use tonic_types::{ErrorDetails, FieldViolation};

    use super::*;

    #[test]
    fn a_status_prints_its_reason_and_each_violation() {
        let mut details = ErrorDetails::with_error_info("INVALID_FIELD", "converge.dev", []);
        details.add_bad_request_violation("name", "must not be empty");
        details.set_bad_request(vec![
            FieldViolation::new("name", "must not be empty"),
            FieldViolation::new("kind_version", "must be >= 1"),
        ]);
        let status = tonic::Status::with_error_details(Code::InvalidArgument, "invalid request", details);
        let err = CliError::from(status);
        assert_eq!(
            err.render(),
            "converge: INVALID_ARGUMENT: invalid request\n  reason: INVALID_FIELD\n  \
             field name: must not be empty\n  field kind_version: must be >= 1\n"
        );
        assert_eq!(err.exit_code(), EXIT_INVALID);
    }

    #[test]
    fn codes_map_to_distinct_exit_codes() {
        let code = |c| CliError::from(tonic::Status::new(c, "x")).exit_code();
        assert_eq!(code(Code::NotFound), EXIT_NOT_FOUND);
        assert_eq!(code(Code::Unavailable), EXIT_UNAVAILABLE);
        assert_eq!(code(Code::InvalidArgument), EXIT_INVALID);
        assert_eq!(code(Code::Aborted), EXIT_FAILURE);
        assert_eq!(CliError::Unavailable("x".into()).exit_code(), EXIT_UNAVAILABLE);
        assert_eq!(CliError::Invalid("x".into()).exit_code(), EXIT_INVALID);
    }
}

//! converge's error reasons, typed.
//!
//! Every error converge returns is a gRPC status carrying one
//! `google.rpc.ErrorInfo` (domain [`ERROR_DOMAIN`]) whose `reason` string
//! names a value of the proto enum `converge.v1.ErrorReason`
//! ([`ErrorReason`], the catalogue of `docs/errors.md`) without its
//! `ERROR_REASON_` prefix. [`StatusExt`] reads it from a [`tonic::Status`]
//! as the enum, so callers compare reasons without writing their strings:
//!
//! ```
//! use converge_sdk::error::{ErrorReason, StatusExt};
//!
//! fn is_missing(status: &tonic::Status) -> bool {
//!     status.has_reason(ErrorReason::ResourceNotFound)
//! }
//! ```

use prost::Message;

pub use converge_proto::google::rpc::ErrorInfo;
pub use converge_proto::v1::ErrorReason;

/// The `ErrorInfo.domain` of converge's errors.
pub const ERROR_DOMAIN: &str = "converge.dev";

/// The prefix of every [`ErrorReason`] value name that the wire string leaves out.
const PREFIX: &str = "ERROR_REASON_";

/// The `ErrorInfo.reason` the server sends for `reason` (its value name
/// without the `ERROR_REASON_` prefix); empty for
/// [`ErrorReason::Unspecified`].
pub fn reason_name(reason: ErrorReason) -> &'static str {
    match reason {
        ErrorReason::Unspecified => "",
        known => known.as_str_name().trim_start_matches(PREFIX),
    }
}

/// The [`ErrorReason`] of a reason as sent (`"RESOURCE_NOT_FOUND"`);
/// [`ErrorReason::Unspecified`] for an empty one and for reasons this SDK
/// does not know (a newer server's).
pub fn parse_reason(reason: &str) -> ErrorReason {
    if reason.is_empty() || reason == "UNSPECIFIED" {
        return ErrorReason::Unspecified;
    }
    ErrorReason::from_str_name(&format!("{PREFIX}{reason}")).unwrap_or(ErrorReason::Unspecified)
}

/// Typed access to the `google.rpc.ErrorInfo` of a converge status.
pub trait StatusExt {
    /// The `ErrorInfo` in the status details, if any.
    fn error_info(&self) -> Option<ErrorInfo>;
    /// The reason as an [`ErrorReason`]; [`ErrorReason::Unspecified`] when
    /// the status carries none or one this SDK does not know.
    fn error_reason(&self) -> ErrorReason;
    /// Whether the status carries `reason` (never for
    /// [`ErrorReason::Unspecified`]).
    fn has_reason(&self, reason: ErrorReason) -> bool {
        reason != ErrorReason::Unspecified && self.error_reason() == reason
    }
}

impl StatusExt for tonic::Status {
    fn error_info(&self) -> Option<ErrorInfo> {
        let status = converge_proto::google::rpc::Status::decode(self.details()).ok()?;
        status
            .details
            .iter()
            .find(|any| any.type_url.ends_with("/google.rpc.ErrorInfo"))
            .and_then(|any| ErrorInfo::decode(any.value.as_slice()).ok())
    }

    fn error_reason(&self) -> ErrorReason {
        self.error_info()
            .map_or(ErrorReason::Unspecified, |info| parse_reason(&info.reason))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status_with(reason: &str) -> tonic::Status {
        let info = ErrorInfo {
            reason: reason.to_owned(),
            domain: ERROR_DOMAIN.to_owned(),
            metadata: Default::default(),
        };
        let details = converge_proto::google::rpc::Status {
            code: tonic::Code::Aborted as i32,
            message: "stale".to_owned(),
            details: vec![prost_types::Any {
                type_url: "type.googleapis.com/google.rpc.ErrorInfo".to_owned(),
                value: info.encode_to_vec(),
            }],
        };
        tonic::Status::with_details(tonic::Code::Aborted, "stale", details.encode_to_vec().into())
    }

    #[test]
    fn every_reason_maps_to_its_wire_string_and_back() {
        let mut n = 0;
        for number in 1.. {
            let Ok(reason) = ErrorReason::try_from(number) else {
                break;
            };
            let name = reason_name(reason);
            assert_eq!(format!("{PREFIX}{name}"), reason.as_str_name());
            assert_eq!(parse_reason(name), reason);
            n += 1;
        }
        assert!(n >= 50, "{n} reasons");
        for not_sent in [
            "",
            "UNSPECIFIED",
            "ERROR_REASON_KIND_NOT_FOUND",
            "ADDED_BY_A_NEWER_SERVER",
        ] {
            assert_eq!(parse_reason(not_sent), ErrorReason::Unspecified, "{not_sent}");
        }
        assert_eq!(reason_name(ErrorReason::Unspecified), "");
    }

    #[test]
    fn a_status_reads_as_its_reason() {
        let status = status_with(reason_name(ErrorReason::EtagMismatch));
        assert_eq!(status.error_reason(), ErrorReason::EtagMismatch);
        assert!(status.has_reason(ErrorReason::EtagMismatch));
        assert!(!status.has_reason(ErrorReason::NameTaken));
        assert_eq!(status.error_info().map(|i| i.domain), Some(ERROR_DOMAIN.to_owned()));

        let newer = status_with("ADDED_BY_A_NEWER_SERVER");
        assert_eq!(newer.error_reason(), ErrorReason::Unspecified);
        assert!(!newer.has_reason(ErrorReason::Unspecified));
        let bare = tonic::Status::not_found("no details");
        assert!(bare.error_info().is_none());
        assert_eq!(bare.error_reason(), ErrorReason::Unspecified);
    }
}

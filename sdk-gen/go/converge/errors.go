package converge

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	convergev1 "converge.dev/sdk/go/gen/converge/v1"
)

// Error is a converge API error decoded from its gRPC status: the code, the
// google.rpc.ErrorInfo (reason, domain, metadata) and the field violations
// of a google.rpc.BadRequest. The helper methods of Client return their
// failures as *Error; AsError decodes any gRPC error the same way.
//
// It wraps the original status error, so status.Code, status.FromError and
// errors.Is against it keep working.
type Error struct {
	// Code is the gRPC status code.
	Code codes.Code
	// Message is the status message.
	Message string
	// Reason is the ErrorInfo reason as sent, the name of a
	// convergev1.ErrorReason value without its ERROR_REASON_ prefix; empty
	// if the status carried none. Compare with ErrorReason or HasReason
	// instead of a hand-written string; this string is for display and for
	// reasons newer than this SDK.
	Reason string
	// Domain is the ErrorInfo domain ("converge.dev" for converge's own).
	Domain string
	// Metadata is the ErrorInfo metadata; nil if none.
	Metadata map[string]string
	// FieldViolations are the google.rpc.BadRequest violations, in order.
	FieldViolations []FieldViolation
	// PreconditionViolations are the google.rpc.PreconditionFailure
	// violations of a refused state change, in order.
	PreconditionViolations []PreconditionViolation
	// RetryDelay is the google.rpc.RetryInfo delay of a transient
	// unavailability; 0 if none.
	RetryDelay time.Duration

	err error
}

// FieldViolation is one offending field of a request.
type FieldViolation struct {
	// Field is a path to the field (converge uses JSON pointers, e.g.
	// "/spec/replicas").
	Field string
	// Description says what is wrong with it.
	Description string
	// Reason is an optional machine-readable cause.
	Reason string
}

// PreconditionViolation is one reason a state change was refused.
type PreconditionViolation struct {
	// Type is the kind of precondition: the reason of the error, as
	// ReasonName(convergev1.ErrorReason_ERROR_REASON_KIND_IN_USE).
	Type string
	// Subject names what failed it (e.g. a resource).
	Subject string
	// Description says how.
	Description string
}

// Error formats the code, the reason when present, the message and the
// violations.
func (e *Error) Error() string {
	s := e.Code.String()
	if e.Reason != "" {
		s += " " + e.Reason
	}
	s += ": " + e.Message
	for _, v := range e.FieldViolations {
		s += fmt.Sprintf("; %s: %s", v.Field, v.Description)
	}
	return s
}

// Unwrap returns the original gRPC status error.
func (e *Error) Unwrap() error { return e.err }

// GRPCStatus returns the status, so status.Code(err) works on an *Error.
func (e *Error) GRPCStatus() *status.Status {
	st, _ := grpcStatus(e.err)
	return st
}

// AsError decodes err into an *Error; nil if err is nil or carries no gRPC
// status. An *Error in err's chain is returned as is.
func AsError(err error) *Error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	st, ok := grpcStatus(err)
	if !ok {
		return nil
	}
	e = &Error{Code: st.Code(), Message: st.Message(), err: err}
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.ErrorInfo:
			if e.Reason == "" {
				e.Reason, e.Domain, e.Metadata = d.GetReason(), d.GetDomain(), d.GetMetadata()
			}
		case *errdetails.PreconditionFailure:
			for _, v := range d.GetViolations() {
				e.PreconditionViolations = append(e.PreconditionViolations, PreconditionViolation{
					Type: v.GetType(), Subject: v.GetSubject(), Description: v.GetDescription(),
				})
			}
		case *errdetails.RetryInfo:
			e.RetryDelay = d.GetRetryDelay().AsDuration()
		case *errdetails.BadRequest:
			for _, v := range d.GetFieldViolations() {
				e.FieldViolations = append(e.FieldViolations, FieldViolation{
					Field: v.GetField(), Description: v.GetDescription(), Reason: v.GetReason(),
				})
			}
		}
	}
	return e
}

// reasonPrefix is the prefix of every convergev1.ErrorReason value name that
// the wire string (ErrorInfo.reason) leaves out.
const reasonPrefix = "ERROR_REASON_"

// ErrorReason is the reason as a convergev1.ErrorReason;
// ERROR_REASON_UNSPECIFIED when the status carried none or one this SDK does
// not know.
func (e *Error) ErrorReason() convergev1.ErrorReason {
	return ParseReason(e.Reason)
}

// Is makes errors.Is(err, ReasonError(r)) true for an *Error with reason r.
func (e *Error) Is(target error) bool {
	r, ok := target.(reasonError)
	return ok && r.reason != convergev1.ErrorReason_ERROR_REASON_UNSPECIFIED &&
		e.ErrorReason() == r.reason
}

// ParseReason maps an ErrorInfo reason as sent ("RESOURCE_NOT_FOUND") to its
// convergev1.ErrorReason; ERROR_REASON_UNSPECIFIED for "" and for reasons this
// SDK does not know.
func ParseReason(reason string) convergev1.ErrorReason {
	if reason == "" || reason == "UNSPECIFIED" {
		return convergev1.ErrorReason_ERROR_REASON_UNSPECIFIED
	}
	return convergev1.ErrorReason(convergev1.ErrorReason_value[reasonPrefix+reason])
}

// ReasonName is the ErrorInfo reason string the server sends for r: its value
// name without the ERROR_REASON_ prefix; "" for ERROR_REASON_UNSPECIFIED and
// for numbers the enum does not define.
func ReasonName(r convergev1.ErrorReason) string {
	name, ok := convergev1.ErrorReason_name[int32(r)]
	if !ok || r == convergev1.ErrorReason_ERROR_REASON_UNSPECIFIED {
		return ""
	}
	return strings.TrimPrefix(name, reasonPrefix)
}

// HasReason reports whether err (or an error it wraps) is a converge error
// with the given ErrorInfo reason:
//
//	converge.HasReason(err, convergev1.ErrorReason_ERROR_REASON_RESOURCE_NOT_FOUND)
//
// It decodes raw gRPC status errors as well as *Error. It is false for
// ERROR_REASON_UNSPECIFIED.
func HasReason(err error, reason convergev1.ErrorReason) bool {
	e := AsError(err)
	return e != nil && reason != convergev1.ErrorReason_ERROR_REASON_UNSPECIFIED && e.ErrorReason() == reason
}

// HasReasonString reports whether err is a converge error whose ErrorInfo
// reason is the string reason.
//
// Deprecated: this is HasReason as it was in 0.1, taking the reason as a
// string; pass the convergev1.ErrorReason to HasReason instead.
func HasReasonString(err error, reason string) bool {
	e := AsError(err)
	return e != nil && e.Reason == reason
}

// ReasonError returns an error that errors.Is matches with every *Error of
// reason r (in err's chain), for code that branches with errors.Is:
//
//	if errors.Is(err, converge.ReasonError(convergev1.ErrorReason_ERROR_REASON_ETAG_MISMATCH)) { ... }
//
// errors.Is only sees an *Error: the Client's helpers return one, a raw stub
// call's error needs AsError (or use HasReason, which decodes either).
func ReasonError(r convergev1.ErrorReason) error { return reasonError{r} }

type reasonError struct{ reason convergev1.ErrorReason }

func (r reasonError) Error() string { return "converge error reason " + ReasonName(r.reason) }

// wrap decodes a call's error (nil stays nil; non-status errors pass through).
func wrap(err error) error {
	if err == nil {
		return nil
	}
	if e := AsError(err); e != nil {
		return e
	}
	return err
}

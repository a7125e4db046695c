package converge

import (
	"errors"
	"fmt"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
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
	// Reason is the ErrorInfo reason (e.g. "RESOURCE_NOT_FOUND"); empty if
	// the status carried none.
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
	// Type is the kind of precondition (e.g. "KIND_IN_USE").
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

// HasReason reports whether err is a converge error with the given ErrorInfo
// reason (e.g. "RESOURCE_NOT_FOUND").
func HasReason(err error, reason string) bool {
	e := AsError(err)
	return e != nil && e.Reason == reason
}

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

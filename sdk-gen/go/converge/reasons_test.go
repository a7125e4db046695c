package converge

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	convergev1 "converge.dev/sdk/go/gen/converge/v1"
)

// A string a newer server might send that this SDK does not know.
const fromTheFuture = "ADDED_BY_A_NEWER_SERVER"

// Offline: every value of the generated enum maps to its wire string and back.
func TestReasonNamesRoundTrip(t *testing.T) {
	if len(convergev1.ErrorReason_name) < 50 {
		t.Fatalf("the generated ErrorReason has %d values", len(convergev1.ErrorReason_name))
	}
	for number, name := range convergev1.ErrorReason_name {
		r := convergev1.ErrorReason(number)
		if r == convergev1.ErrorReason_ERROR_REASON_UNSPECIFIED {
			continue
		}
		wire := ReasonName(r)
		if wire == "" || strings.HasPrefix(wire, "ERROR_REASON_") || "ERROR_REASON_"+wire != name {
			t.Errorf("ReasonName(%s) = %q", name, wire)
		}
		if got := ParseReason(wire); got != r {
			t.Errorf("ParseReason(%q) = %v, want %v", wire, got, r)
		}
	}
	unspecified := convergev1.ErrorReason_ERROR_REASON_UNSPECIFIED
	// Not wire strings: the empty one, the zero value's name, a full value
	// name (with its prefix) and one a newer server might send.
	notSent := []string{"", "UNSPECIFIED", convergev1.ErrorReason_ERROR_REASON_KIND_NOT_FOUND.String(), fromTheFuture}
	for _, s := range notSent {
		if got := ParseReason(s); got != unspecified {
			t.Errorf("ParseReason(%q) = %v, want UNSPECIFIED", s, got)
		}
	}
	if ReasonName(unspecified) != "" || ReasonName(convergev1.ErrorReason(9999)) != "" {
		t.Error("ReasonName of UNSPECIFIED or an unknown number must be empty")
	}
}

// Offline: HasReason, errors.Is and the deprecated string form agree, through
// wrapping, for raw status errors and *Error.
func TestHasReasonAndErrorsIs(t *testing.T) {
	etag := convergev1.ErrorReason_ERROR_REASON_ETAG_MISMATCH
	st, err := status.New(codes.Aborted, "stale").WithDetails(
		&errdetails.ErrorInfo{Reason: ReasonName(etag), Domain: ErrorDomain},
	)
	if err != nil {
		t.Fatal(err)
	}
	raw := fmt.Errorf("apply: %w", st.Err())
	decoded := fmt.Errorf("apply: %w", AsError(st.Err()))
	for _, e := range []error{raw, decoded} {
		if !HasReason(e, etag) || HasReason(e, convergev1.ErrorReason_ERROR_REASON_NAME_TAKEN) ||
			HasReason(e, convergev1.ErrorReason_ERROR_REASON_UNSPECIFIED) {
			t.Errorf("HasReason on %v", e)
		}
		if !HasReasonString(e, ReasonName(etag)) {
			t.Errorf("HasReasonString on %v", e)
		}
	}
	if !errors.Is(decoded, ReasonError(etag)) || errors.Is(decoded, ReasonError(convergev1.ErrorReason_ERROR_REASON_NAME_TAKEN)) {
		t.Errorf("errors.Is(%v, ReasonError)", decoded)
	}
	if !errors.Is(decoded, st.Err()) && status.Code(decoded) != codes.Aborted {
		t.Errorf("the status error is still in the chain of %v", decoded)
	}
	if HasReason(nil, etag) || HasReason(errors.New("plain"), etag) {
		t.Error("HasReason of a non-converge error must be false")
	}
	unknown, _ := status.New(codes.Unavailable, "x").WithDetails(&errdetails.ErrorInfo{Reason: fromTheFuture})
	if e := AsError(unknown.Err()); e.ErrorReason() != convergev1.ErrorReason_ERROR_REASON_UNSPECIFIED || e.Reason != fromTheFuture {
		t.Errorf("an unknown reason: %+v", e)
	}
}

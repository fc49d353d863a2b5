package kube

import (
	"errors"
	"fmt"
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipkeeper/ipkeeper/internal/store"
)

// mapErr turns an API or transport error of a request on the object
// `what` (e.g. `IPAMNode "n1"`) into the contract's errors:
//
//	404 of the object                  ErrNotFound
//	404 of the resource                ErrNoCRD (wraps ErrUnavailable)
//	409 AlreadyExists                  ErrExists
//	409 Conflict (stale version,
//	    failed precondition)           ErrConflict
//	401, 403                           ErrAccessDenied
//	422 Invalid, 400                   ErrInvalid (the schema refused it)
//	413                                ErrTooLarge
//	429, 5xx, timeouts, network, ctx   ErrUnavailable
func mapErr(what string, err error) error {
	if err == nil {
		return nil
	}
	var st apierrors.APIStatus
	if !errors.As(err, &st) {
		// Transport errors (connection refused or reset, TLS), context
		// cancellation and deadlines: the request may or may not have
		// reached the server.
		return fmt.Errorf("%w: %s: %w", store.ErrUnavailable, what, err)
	}
	s := st.Status()
	switch {
	case apierrors.IsNotFound(err):
		if noResource(s) {
			return fmt.Errorf("%w: %s: %v", ErrNoCRD, what, err)
		}
		return fmt.Errorf("%w: %s", store.ErrNotFound, what)
	case apierrors.IsAlreadyExists(err):
		return fmt.Errorf("%w: %s", store.ErrExists, what)
	case apierrors.IsConflict(err):
		return fmt.Errorf("%w: %s: %v", store.ErrConflict, what, err)
	case apierrors.IsUnauthorized(err), apierrors.IsForbidden(err):
		return fmt.Errorf("%w: %s: %v", ErrAccessDenied, what, err)
	case apierrors.IsInvalid(err), apierrors.IsBadRequest(err):
		return fmt.Errorf("%w: %s: the API server refused it: %v", store.ErrInvalid, what, err)
	case apierrors.IsRequestEntityTooLargeError(err):
		return fmt.Errorf("%w: %s: %v", store.ErrTooLarge, what, err)
	case apierrors.IsTooManyRequests(err), apierrors.IsTimeout(err), apierrors.IsServerTimeout(err),
		apierrors.IsServiceUnavailable(err), apierrors.IsInternalError(err), s.Code >= http.StatusInternalServerError:
		return fmt.Errorf("%w: %s: %v", store.ErrUnavailable, what, err)
	}
	return fmt.Errorf("kubernetes datastore: %s: %w", what, err)
}

// noResource tells a 404 of a resource the server does not serve (an
// empty answer, which client-go turns into a generic error) from a 404 of
// an object (a Status naming it).
func noResource(s metav1.Status) bool {
	if s.Details == nil || s.Details.Name == "" {
		return true
	}
	for _, c := range s.Details.Causes {
		if c.Type == metav1.CauseTypeUnexpectedServerResponse {
			return true
		}
	}
	return false
}

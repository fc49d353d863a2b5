package plugin

import (
	"errors"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/config"
	"github.com/ipkeeper/ipkeeper/internal/datastore"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/netpools"
	"github.com/ipkeeper/ipkeeper/internal/podinfo"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

// CNI error codes ipkeeper returns besides the spec's well-known ones.
const (
	// CodePoolExhausted: no pool of a range set has a free address.
	CodePoolExhausted uint = 100
	// CodeNoPool: no pool of a range set may be used on this node.
	CodeNoPool uint = 101
	// CodeAddrUnavailable: a requested address is taken or reserved.
	CodeAddrUnavailable uint = 102
	// CodeNotAvailable is the CNI 1.1 STATUS code "plugin not available".
	CodeNotAvailable uint = 50
)

// Sentinels of this package, mapped to codes below.
var (
	// errArgs marks errors in CNI_ARGS or other environment input.
	errArgs = errors.New("invalid CNI arguments")
	// errOwnNetNS: CNI_NETNS is the plugin's own network namespace.
	errOwnNetNS = errors.New("invalid network namespace")
	// errTimeout: the invocation overran its timeout.
	errTimeout = errors.New("timed out")
	// errIO: stdin or stdout failed.
	errIO = errors.New("I/O failure")
)

// cniError maps an error from any layer to the CNI error the runtime sees.
// This is the only place that knows CNI codes.
func cniError(err error) *types.Error {
	var te *types.Error
	switch {
	case err == nil:
		return nil
	case errors.As(err, &te):
		return te
	case errors.Is(err, errArgs):
		return types.NewError(types.ErrInvalidEnvironmentVariables, err.Error(), "")
	case errors.Is(err, errOwnNetNS):
		// skel's code for this case, which runtimes know.
		return types.NewError(types.ErrInvalidNetNS, err.Error(), "")
	case errors.Is(err, errTimeout):
		return types.NewError(types.ErrTryAgainLater, err.Error(), "")
	case errors.Is(err, errIO):
		return types.NewError(types.ErrIOFailure, err.Error(), "")
	case errors.Is(err, config.ErrNoPodCIDR):
		return types.NewError(CodeNoPool, err.Error(), "")
	case errors.Is(err, config.ErrInvalid), errors.Is(err, ipam.ErrInvalidPool),
		errors.Is(err, datastore.ErrUnsupported), errors.Is(err, datastore.ErrBadPath),
		errors.Is(err, allocator.ErrPoolConflict), errors.Is(err, allocator.ErrPoolNotFound),
		errors.Is(err, store.ErrDenied), errors.Is(err, store.ErrBadConfig),
		errors.Is(err, podinfo.ErrKubeconfig), errors.Is(err, podinfo.ErrDenied),
		errors.Is(err, podinfo.ErrAnnotation), errors.Is(err, podinfo.ErrNodeNotFound), errors.Is(err, podinfo.ErrWrongNode),
		errors.Is(err, netpools.ErrWrongFamily), errors.Is(err, netpools.ErrPodCIDRUnknown):
		return types.NewError(types.ErrInvalidNetworkConfig, err.Error(), "")
	case errors.Is(err, podinfo.ErrUnavailable), errors.Is(err, podinfo.ErrPodNotFound),
		errors.Is(err, podinfo.ErrAgentUnreachable), errors.Is(err, podinfo.ErrAgentNotReady):
		return types.NewError(types.ErrTryAgainLater, err.Error(), "")
	case errors.Is(err, allocator.ErrExhausted):
		return types.NewError(CodePoolExhausted, err.Error(), "")
	case errors.Is(err, allocator.ErrNoPool):
		return types.NewError(CodeNoPool, err.Error(), "")
	case errors.Is(err, allocator.ErrAddrUnavailable), errors.Is(err, allocator.ErrStickyHeld):
		return types.NewError(CodeAddrUnavailable, err.Error(), "")
	case errors.Is(err, allocator.ErrCorrupt), errors.Is(err, store.ErrCorrupt), errors.Is(err, allocator.ErrBlockNotClaimed):
		// Stored state that must not be used (a value that fails
		// validation, a block the cluster's claims do not give to the node
		// holding it): retrying does not help; 'ipkeeperctl check' reports
		// it. The message names the object.
		return types.NewError(types.ErrInternal, err.Error(), "")
	case errors.Is(err, store.ErrUnavailable), errors.Is(err, allocator.ErrContended),
		errors.Is(err, errNoKubeBinary):
		return types.NewError(types.ErrTryAgainLater, err.Error(), "")
	default:
		return types.NewError(types.ErrInternal, err.Error(), "")
	}
}

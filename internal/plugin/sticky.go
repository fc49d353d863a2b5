package plugin

import (
	"context"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
)

// stickyIdentity decides whether the attachment's addresses are sticky
// and for which identity: only a StatefulSet's pod or a KubeVirt
// machine's launcher pod has one; the pod's or its namespace's
// ipkeeper.io/sticky annotation decides, else ipam.sticky, else the
// pools the request draws from (ipam.Pool.Sticky), which are read only
// for a pod with an identity and no annotation.
func (s *session) stickyIdentity(ctx context.Context, pa podAware, req allocator.Request) (ipam.StickyID, bool, error) {
	id, annotated, err := pa.info.StickyChoice()
	switch {
	case err != nil || id.Kind == "":
		return ipam.StickyID{}, false, err
	case annotated != nil:
		return id, *annotated, nil
	case s.conf.Sticky:
		return id, true, nil
	}
	on, err := s.alloc.PoolsSticky(ctx, req)
	return id, on && err == nil, err
}

package allocator

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/labels"
)

// Request asks for one address from each range set for one handle.
type Request struct {
	// Handle carries the ID, node and attributes; its IPs are ignored.
	Handle ipam.Handle
	// Sets lists, per range set, the names of the pools to try in order.
	Sets [][]string
	// Labels are the node's labels, matched against pool node selectors.
	Labels map[string]string
	// Want optionally names specific addresses; each is taken from the
	// range set whose pools contain it.
	Want []netip.Addr
	// Define gives the definitions of pools a config derives from its
	// ranges: each is created when absent, and checked against the stored
	// pool otherwise (as EnsurePool does).
	Define []ipam.Pool
}

// poolNames lists the pools of every range set once, in order.
func (r Request) poolNames() []string {
	var names []string
	for _, set := range r.Sets {
		for _, n := range set {
			if !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
	}
	return names
}

// findPool returns the pool named name among pools.
func findPool(pools []ipam.Pool, name string) (ipam.Pool, bool) {
	for _, p := range pools {
		if p.Name == name {
			return p, true
		}
	}
	return ipam.Pool{}, false
}

// usablePools returns the pools of a set that may hand out addresses on a
// node with the given labels.
func usablePools(set []string, pools map[string]ipam.Pool, nodeLabels map[string]string) ([]ipam.Pool, error) {
	var out []ipam.Pool
	for _, n := range set {
		pool := pools[n]
		if pool.Disabled || pool.Deleting {
			continue
		}
		sel, err := labels.Parse(pool.NodeSelector)
		if err != nil {
			return nil, fmt.Errorf("pool %q nodeSelector: %w", n, err)
		}
		if sel.Matches(nodeLabels) {
			out = append(out, pool)
		}
	}
	if len(out) == 0 {
		var why []string
		for _, n := range set {
			if pools[n].Deleting {
				why = append(why, RemovalAdvice(n))
			}
		}
		if len(why) == 0 {
			return nil, fmt.Errorf("%w: pools %s are disabled or select other nodes", ErrNoPool, strings.Join(set, ", "))
		}
		if len(why) < len(set) {
			why = append(why, "the others are disabled or select other nodes")
		}
		return nil, fmt.Errorf("%w: %s", ErrNoPool, strings.Join(why, "; "))
	}
	return out, nil
}

// confirmUnusable decides again, on the set's pools read past the
// allocator's cache, that none may be used: a refusal is never decided on
// a copy that may predate the pool's re-enabling or the cancelling of its
// removal (the cache's, or a hint file's that each process of the node
// would take again). It costs a refused allocation a read per pool.
func (a *Allocator) confirmUnusable(ctx context.Context, set []string, pools map[string]ipam.Pool, nodeLabels map[string]string) ([]ipam.Pool, error) {
	for _, n := range set {
		p, err := a.poolMaybeStale(ctx, n)
		if err != nil {
			return nil, err
		}
		a.cachePool(p)
		pools[n] = p
	}
	return usablePools(set, pools, nodeLabels)
}

func wanted(want []netip.Addr, pools []ipam.Pool) (netip.Addr, bool) {
	for _, w := range want {
		for _, pool := range pools {
			if pool.CIDR.Contains(w) {
				return w, true
			}
		}
	}
	return netip.Addr{}, false
}

// RemovalAdvice says that pool is being removed and how to finish or
// cancel that, for errors of allocations that find it marked Deleting.
func RemovalAdvice(pool string) string {
	return fmt.Sprintf("pool %q is being removed (an 'ipkeeperctl pool rm' is running or was interrupted): run 'ipkeeperctl pool rm %s' to finish removing it, or 'ipkeeperctl pool rm --cancel %s' to keep it",
		pool, pool, pool)
}

// Package netpools turns the address ranges of a network config into
// pools: host-local and whereabouts ranges become pools created on first
// use, named pools are looked up. The plugin and ipkeeperctl share it so
// that both name a range's pool the same way.
package netpools

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/config"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
)

// Pools reads pool definitions (allocator.Allocator does).
type Pools interface {
	// Pool returns the named pool, or an error wrapping
	// allocator.ErrPoolNotFound.
	Pool(ctx context.Context, name string) (ipam.Pool, error)
	// Pools lists every pool.
	Pools(ctx context.Context) ([]ipam.Pool, error)
}

// Set is one range set: the pools to try, in order, for one address.
type Set []ipam.Pool

// Names returns the names of the set's pools.
func (s Set) Names() []string {
	out := make([]string, len(s))
	for i, p := range s {
		out[i] = p.Name
	}
	return out
}

// ErrPodCIDRUnknown is returned by Planned for a range that stands for the
// node's pod CIDR (usePodCidr) in a config not parsed for the node.
var ErrPodCIDRUnknown = errors.New("the node's pod CIDR is not known")

// Planned returns the pools the config's ranges define, without touching
// any store: one set per range set.
func Planned(conf *config.IPAM) ([]Set, error) {
	var sets []Set
	for i, rs := range conf.RangeSets {
		var set Set
		for j, r := range rs {
			if r.UsePodCIDR != 0 {
				return nil, fmt.Errorf("ipam.ranges[%d][%d]: %w (config.IPAM.ForNode fills them in)", i, j, ErrPodCIDRUnknown)
			}
			p := FromRange(conf, r)
			if err := p.Validate(); err != nil {
				return nil, fmt.Errorf("ipam.ranges[%d][%d]: %w", i, j, err)
			}
			set = append(set, p)
		}
		sets = append(sets, set)
	}
	return sets, nil
}

// Resolve returns the range sets of conf and the pool definitions the
// allocation must create when absent (allocator.Request.Define): ranges
// become pools defined by the config, created by the first allocation's
// own transaction; named pools are read and grouped into one set per IP
// family (IPv4 first) and define nothing.
func Resolve(ctx context.Context, a Pools, conf *config.IPAM) (sets []Set, define []ipam.Pool, err error) {
	if len(conf.Pools) > 0 {
		sets, err = named(ctx, a, conf.Pools)
		return sets, nil, err
	}
	if sets, err = Planned(conf); err != nil {
		return nil, nil, err
	}
	return sets, Definitions(sets), nil
}

// Definitions lists the pools of planned range sets: those an allocation
// defines (allocator.Request.Define).
func Definitions(sets []Set) []ipam.Pool {
	var define []ipam.Pool
	for _, set := range sets {
		define = append(define, set...)
	}
	return define
}

func named(ctx context.Context, a Pools, names []string) ([]Set, error) {
	var v4, v6 Set
	var all []ipam.Pool // listed once, when a CIDR names a pool
	for _, n := range names {
		p, err := lookup(ctx, a, n, &all)
		if err != nil {
			return nil, err
		}
		if p.Is6() {
			v6 = append(v6, p)
		} else {
			v4 = append(v4, p)
		}
	}
	var sets []Set
	for _, s := range []Set{v4, v6} {
		if len(s) > 0 {
			sets = append(sets, s)
		}
	}
	return sets, nil
}

// FromRange defines the pool of one configured range. Whereabouts ranges
// are named like whereabouts names its IPPool objects ("10.0.0.0-24",
// prefixed by network_name when set), so imported pools line up; host-local
// and native ranges are named per network, since host-local keeps every
// network's addresses apart.
func FromRange(conf *config.IPAM, r config.Range) ipam.Pool {
	p := ipam.Pool{
		CIDR:           r.Subnet.Masked(),
		RangeStart:     r.RangeStart,
		RangeEnd:       r.RangeEnd,
		Gateway:        r.Gateway,
		Exclude:        r.Exclude,
		StrictAffinity: conf.StrictAffinity,
		Origin:         "config",
	}
	p.BlockSize = ipam.BlockSizeFor(p.CIDR, conf.BlockSize, conf.BlockSizeV6)
	if conf.Syntax == "whereabouts" {
		p.Name = WhereaboutsName(conf.NetworkName, p.CIDR)
	} else {
		p.Name = conf.Network + "-" + rangeName(r)
	}
	return p
}

// WhereaboutsName is the name whereabouts gives the IPPool of cidr.
func WhereaboutsName(networkName string, cidr netip.Prefix) string {
	n := strings.NewReplacer("/", "-", ":", "-").Replace(cidr.Masked().String())
	if networkName != "" {
		return networkName + "-" + n
	}
	return n
}

func rangeName(r config.Range) string {
	n := strings.Replace(r.Subnet.Masked().String(), "/", "-", 1)
	if r.RangeStart.IsValid() || r.RangeEnd.IsValid() {
		n += "-" + r.RangeStart.String() + "-" + r.RangeEnd.String()
	}
	return n
}

// lookup returns the pool named n, or, when n is a CIDR (as Calico's pool
// annotations may give), the pool whose CIDR it is. all caches the pool
// list across calls.
func lookup(ctx context.Context, a Pools, n string, all *[]ipam.Pool) (ipam.Pool, error) {
	cidr, err := netip.ParsePrefix(n)
	if err != nil {
		return a.Pool(ctx, n)
	}
	if *all == nil {
		if *all, err = a.Pools(ctx); err != nil {
			return ipam.Pool{}, err
		}
	}
	for _, p := range *all {
		if p.CIDR == cidr.Masked() {
			return p, nil
		}
	}
	return ipam.Pool{}, fmt.Errorf("%w: no pool has CIDR %s", allocator.ErrPoolNotFound, cidr)
}

// Override replaces range sets by pools a workload names: all (when not
// nil) replaces every set, grouped into one set per family as ipam.pools
// is; otherwise v4 and v6 (when not nil) replace the IPv4 or IPv6 sets by
// one set of those pools, added when the config has none of that family.
// Entries are pool names or CIDRs; from names their source in errors.
// Pools of the wrong family are an error wrapping ErrWrongFamily.
func Override(ctx context.Context, a Pools, sets []Set, all, v4, v6 []string, from string) ([]Set, error) {
	if all != nil {
		out, err := named(ctx, a, all)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", from, err)
		}
		return out, nil
	}
	out := sets
	for _, f := range []struct {
		names []string
		is6   bool
	}{{v4, false}, {v6, true}} {
		if f.names == nil {
			continue
		}
		var repl Set
		var cache []ipam.Pool
		for _, n := range f.names {
			p, err := lookup(ctx, a, n, &cache)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", from, err)
			}
			if p.Is6() != f.is6 {
				return nil, fmt.Errorf("%s: %w: pool %q (%s) is not %s", from, ErrWrongFamily, p.Name, p.CIDR, map[bool]string{false: "IPv4", true: "IPv6"}[f.is6])
			}
			repl = append(repl, p)
		}
		var kept []Set
		placed := false
		for _, set := range out {
			if len(set) > 0 && set[0].Is6() == f.is6 {
				if !placed {
					kept, placed = append(kept, repl), true
				}
				continue
			}
			kept = append(kept, set)
		}
		if !placed {
			if f.is6 {
				kept = append(kept, repl)
			} else {
				kept = append([]Set{repl}, kept...)
			}
		}
		out = kept
	}
	return out, nil
}

// ErrWrongFamily: a workload named a pool of the other IP family.
var ErrWrongFamily = errors.New("pool of the wrong IP family")

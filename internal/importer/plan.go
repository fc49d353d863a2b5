// Package importer recreates another IPAM's allocations in ipkeeper so that
// running pods keep their addresses: the calico and whereabouts
// sub-packages turn their state into a Plan, and ApplyStore writes a Plan
// into the typed store, idempotently and without overwriting anything
// that disagrees with it.
package importer

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
)

// Origin is the Origin of every pool an import creates: the first network
// config that names the pool may then set its range, gateway and
// exclusions (see allocator.EnsurePool).
const Origin = "import"

// ErrInvalidSource means the data to import is malformed or inconsistent.
var ErrInvalidSource = errors.New("invalid import source")

// ErrConflict means the datastore holds state that disagrees with the
// import; nothing that disagrees is overwritten.
var ErrConflict = errors.New("import conflicts with ipkeeper state")

// Plan is the ipkeeper state an import recreates.
type Plan struct {
	// Source names what was read ("calico", "whereabouts").
	Source string
	// Pools, Blocks and Handles are written by ApplyStore. Every
	// allocation of a block names a handle of the plan that lists it, and
	// every address a handle lists is allocated to it by a block of the
	// plan.
	Pools   []ipam.Pool
	Blocks  []ipam.Block
	Handles []ipam.Handle
	// Warnings are things a person should know (data that was skipped,
	// guesses that were made).
	Warnings []string
}

// Addresses returns every allocated address of the plan, sorted.
func (p *Plan) Addresses() []netip.Addr {
	var out []netip.Addr
	for _, b := range p.Blocks {
		for _, a := range b.Allocations() {
			out = append(out, a.Addr)
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

// Validate checks that the plan is internally consistent: valid pools,
// blocks that are whole blocks of their pool with a free queue and
// allocations covering each address once, and handles and block
// allocations that agree.
func (p *Plan) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidSource, fmt.Sprintf(format, args...))
	}
	pools := map[string]ipam.Pool{}
	for _, pl := range p.Pools {
		if err := pl.Validate(); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidSource, err)
		}
		if _, dup := pools[pl.Name]; dup {
			return bad("pool %q defined twice", pl.Name)
		}
		for _, q := range pools {
			if q.CIDR.Overlaps(pl.CIDR) {
				return bad("pools %s (%s) and %s (%s) overlap", q.Name, q.CIDR, pl.Name, pl.CIDR)
			}
		}
		pools[pl.Name] = pl
	}
	owners := map[string]map[netip.Addr]string{} // pool → addr → handle
	seenBlock := map[string]bool{}
	for _, b := range p.Blocks {
		pl, ok := pools[b.Pool]
		if !ok {
			return bad("block %s names pool %q, which the import does not define", b.CIDR, b.Pool)
		}
		if !pl.CIDR.Contains(b.CIDR.Addr()) || b.CIDR.Bits() != pl.BlockSize || b.CIDR != b.CIDR.Masked() {
			return bad("block %s is not a /%d block of pool %s (%s)", b.CIDR, pl.BlockSize, pl.Name, pl.CIDR)
		}
		if seenBlock[b.Pool+b.CIDR.String()] {
			return bad("block %s of pool %s defined twice", b.CIDR, b.Pool)
		}
		seenBlock[b.Pool+b.CIDR.String()] = true
		if probs := b.Check(); len(probs) > 0 {
			return bad("block %s: %s", b.CIDR, strings.Join(probs, "; "))
		}
		if owners[b.Pool] == nil {
			owners[b.Pool] = map[netip.Addr]string{}
		}
		for _, a := range b.Allocations() {
			owners[b.Pool][a.Addr] = a.Handle
		}
	}
	listed := map[string]map[netip.Addr]string{}
	seenHandle := map[string]bool{}
	for _, h := range p.Handles {
		if h.ID == "" || seenHandle[h.ID] {
			return bad("handle ID %q empty or defined twice", h.ID)
		}
		seenHandle[h.ID] = true
		if len(h.IPs) == 0 {
			return bad("handle %q has no address", h.ID)
		}
		for _, ip := range h.IPs {
			if owners[ip.Pool][ip.Addr] != h.ID {
				return bad("handle %q lists %s in pool %s, which no block of the import gives it", h.ID, ip.Addr, ip.Pool)
			}
			if want, _ := ip.Addr.Prefix(pools[ip.Pool].BlockSize); ip.Block != want {
				return bad("handle %q names block %s for %s, want %s", h.ID, ip.Block, ip.Addr, want)
			}
			if listed[ip.Pool] == nil {
				listed[ip.Pool] = map[netip.Addr]string{}
			}
			listed[ip.Pool][ip.Addr] = h.ID
		}
	}
	for _, pool := range slices.Sorted(maps.Keys(owners)) {
		for a, h := range owners[pool] {
			if listed[pool][a] != h {
				return bad("%s in pool %s is allocated to %q, which does not list it", a, pool, h)
			}
		}
	}
	return nil
}

// Builder assembles a Plan: the sub-packages add pools, blocks and the
// handles their allocations name.
type Builder struct {
	plan    *Plan
	pools   map[string]int // name → index in plan.Pools
	handles map[string]int // ID → index in plan.Handles
}

// NewBuilder returns a builder for a plan of source.
func NewBuilder(source string) *Builder {
	return &Builder{plan: &Plan{Source: source}, pools: map[string]int{}, handles: map[string]int{}}
}

// Pool adds pool unless one of that name was added; it returns the pool
// stored under the name, and an error when the two definitions differ.
func (b *Builder) Pool(p ipam.Pool) (ipam.Pool, error) {
	if i, ok := b.pools[p.Name]; ok {
		have := b.plan.Pools[i]
		if !have.SameDefinition(p) {
			return have, fmt.Errorf("%w: pool %q would be both %s /%d and %s /%d", ErrInvalidSource, p.Name, have.CIDR, have.BlockSize, p.CIDR, p.BlockSize)
		}
		return have, nil
	}
	p.Origin = Origin
	b.pools[p.Name] = len(b.plan.Pools)
	b.plan.Pools = append(b.plan.Pools, p)
	return p, nil
}

// Block adds a block; Handle must be called for every handle it names.
func (b *Builder) Block(blk ipam.Block) { b.plan.Blocks = append(b.plan.Blocks, blk) }

// Handle adds addr (in block of pool) to the handle with h's ID, creating
// it from h when new; attributes of later calls fill only empty fields.
func (b *Builder) Handle(h ipam.Handle, ip ipam.HandleIP) {
	i, ok := b.handles[h.ID]
	if !ok {
		h.IPs = nil
		i = len(b.plan.Handles)
		b.handles[h.ID] = i
		b.plan.Handles = append(b.plan.Handles, h)
	}
	have := &b.plan.Handles[i]
	for _, f := range []struct {
		dst *string
		src string
	}{
		{&have.Node, h.Node}, {&have.Namespace, h.Namespace}, {&have.Pod, h.Pod}, {&have.PodUID, h.PodUID},
		{&have.Network, h.Network}, {&have.ContainerID, h.ContainerID}, {&have.IfName, h.IfName}, {&have.NetNS, h.NetNS},
	} {
		if *f.dst == "" {
			*f.dst = f.src
		}
	}
	if have.Created.IsZero() {
		have.Created = h.Created
	}
	have.IPs = append(have.IPs, ip)
}

// Warn records a warning.
func (b *Builder) Warn(format string, args ...any) {
	b.plan.Warnings = append(b.plan.Warnings, fmt.Sprintf(format, args...))
}

// Plan returns the assembled plan, sorted, after validating it.
func (b *Builder) Plan() (*Plan, error) {
	p := b.plan
	slices.SortFunc(p.Pools, func(x, y ipam.Pool) int { return strings.Compare(x.Name, y.Name) })
	slices.SortFunc(p.Blocks, func(x, y ipam.Block) int {
		if c := strings.Compare(x.Pool, y.Pool); c != 0 {
			return c
		}
		return x.CIDR.Addr().Compare(y.CIDR.Addr())
	})
	slices.SortFunc(p.Handles, func(x, y ipam.Handle) int { return strings.Compare(x.ID, y.ID) })
	for i := range p.Handles {
		slices.SortFunc(p.Handles[i].IPs, func(x, y ipam.HandleIP) int { return x.Addr.Compare(y.Addr) })
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return p, nil
}

package ctl

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

type allocView struct {
	Addr      string    `json:"addr"`
	Handle    string    `json:"handle"`
	Namespace string    `json:"namespace,omitempty"`
	Pod       string    `json:"pod,omitempty"`
	Node      string    `json:"node,omitempty"`
	Created   time.Time `json:"created,omitzero"`
	// Sticky is the identity the address stays reserved for; Parked is
	// when its pod went away (zero while one uses it).
	Sticky string    `json:"sticky,omitempty"`
	Parked time.Time `json:"parked,omitzero"`
	// NoRecord is set when the handle the block names does not exist.
	NoRecord bool `json:"noRecord,omitempty"`
}

type blockView struct {
	CIDR        string      `json:"cidr"`
	Pool        string      `json:"pool"`
	Node        string      `json:"node"`
	Size        int         `json:"size"`
	InUse       int         `json:"inUse"`
	Free        int         `json:"free"`
	Allocations []allocView `json:"allocations"`
}

type blocksView struct {
	// Query is the prefix asked about.
	Query  string      `json:"query"`
	Blocks []blockView `json:"blocks"`
}

func (v blocksView) table(w io.Writer) {
	if len(v.Blocks) == 0 {
		fmt.Fprintf(w, "no claimed block in %s\n", v.Query)
	}
	for i, b := range v.Blocks {
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "BLOCK %s  POOL %s  NODE %s  IN USE %d/%d  FREE %d\n", b.CIDR, b.Pool, dash(b.Node), b.InUse, b.Size, b.Free)
		if len(b.Allocations) == 0 {
			continue
		}
		row(w, "ADDRESS", "HANDLE", "POD", "NODE", "SINCE")
		for _, a := range b.Allocations {
			h := a.Handle
			if a.NoRecord {
				h += " (no record)"
			}
			h += stickyNote(a.Sticky, a.Parked)
			row(w, a.Addr, h, podName(a.Namespace, a.Pod), dash(a.Node), since(a.Created))
		}
	}
}

func (c *cli) blockCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "block", Short: "Inspect blocks"}
	var pool string
	show := &cobra.Command{
		Use:   "show CIDR|IP",
		Short: "A block with every allocated address spelled out (a larger CIDR shows every claimed block in it)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			q, err := parseQuery(args[0])
			if err != nil {
				return err
			}
			return c.withStore(cmd.Context(), func(a *allocator.Allocator) error {
				v, err := blocksIn(cmd.Context(), a, q, pool)
				if err != nil {
					return err
				}
				return c.print(v)
			})
		},
	}
	show.Flags().StringVar(&pool, "pool", "", "look only in this pool")
	cmd.AddCommand(show)
	return cmd
}

// parseQuery reads a CIDR or a single address.
func parseQuery(s string) (netip.Prefix, error) {
	if !strings.Contains(s, "/") {
		a, err := parseAddr(s)
		if err != nil {
			return netip.Prefix{}, err
		}
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return p, fmt.Errorf("%q is not a CIDR", s)
	}
	return p.Masked(), nil
}

// blocksIn returns the claimed blocks overlapping q: the block holding q
// when q is within one, else every claimed block inside q.
func blocksIn(ctx context.Context, a *allocator.Allocator, q netip.Prefix, only string) (blocksView, error) {
	v := blocksView{Query: q.String(), Blocks: []blockView{}}
	pools, err := a.Pools(ctx)
	if err != nil {
		return v, err
	}
	found := false
	for _, p := range pools {
		if !p.CIDR.Overlaps(q) || only != "" && p.Name != only {
			continue
		}
		found = true
		var blocks []claimedBlock
		if q.Bits() >= p.BlockSize {
			cidr, _ := q.Addr().Prefix(p.BlockSize)
			cb, claimed, err := readClaim(ctx, a.Store(), store.BlockRef{Pool: p.Name, CIDR: cidr})
			if err != nil {
				return v, err
			}
			if claimed {
				blocks = append(blocks, cb)
			}
		} else {
			all, err := readClaimed(ctx, a.Store(), store.ClaimSelector{Pool: p.Name})
			if err != nil {
				return v, err
			}
			for _, cb := range all {
				if q.Contains(cb.Claim.CIDR.Addr()) {
					blocks = append(blocks, cb)
				}
			}
		}
		for _, cb := range blocks {
			v.Blocks = append(v.Blocks, describeBlock(p, cb))
		}
	}
	if !found {
		return v, fmt.Errorf("%w: no pool holds %s", allocator.ErrPoolNotFound, q)
	}
	return v, nil
}

// describeBlock spells out every allocation of a claimed block with its
// handle's record.
func describeBlock(p ipam.Pool, cb claimedBlock) blockView {
	b := cb.Block
	v := blockView{CIDR: b.CIDR.String(), Pool: p.Name, Node: shownNode(cb.Claim.Node), Size: b.Size(), InUse: b.InUse(),
		Free: cb.freeCount(p), Allocations: []allocView{}}
	for _, al := range b.Allocations() {
		av := allocView{Addr: al.Addr.String(), Handle: al.Handle}
		_, rec := cb.record(ordinal(b.CIDR, al.Addr))
		if rec == nil {
			av.NoRecord = true
		} else {
			av.Namespace, av.Pod, av.Node, av.Created = rec.Namespace, rec.Pod, rec.Node, rec.Created
			av.Sticky, av.Parked = rec.Sticky, rec.Parked
		}
		v.Allocations = append(v.Allocations, av)
	}
	return v
}

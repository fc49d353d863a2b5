package ctl

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
)

type allocView struct {
	Addr      string    `json:"addr"`
	Handle    string    `json:"handle"`
	Namespace string    `json:"namespace,omitempty"`
	Pod       string    `json:"pod,omitempty"`
	Node      string    `json:"node,omitempty"`
	Created   time.Time `json:"created,omitzero"`
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
		var blocks []ipam.Block
		if q.Bits() >= p.BlockSize {
			cidr, _ := q.Addr().Prefix(p.BlockSize)
			es, err := a.Store().Get(ctx, allocator.BlockKey(p.Name, cidr))
			if err != nil {
				return v, err
			}
			if es[0].Version != 0 {
				var b ipam.Block
				if err := json.Unmarshal(es[0].Value, &b); err != nil {
					return v, fmt.Errorf("%w: %s: %v", allocator.ErrCorrupt, es[0].Key, err)
				}
				blocks = append(blocks, b)
			}
		} else {
			all, err := a.Blocks(ctx, p.Name)
			if err != nil {
				return v, err
			}
			for _, b := range all {
				if q.Contains(b.CIDR.Addr()) {
					blocks = append(blocks, b)
				}
			}
		}
		for _, b := range blocks {
			bv, err := describeBlock(ctx, a, p, b)
			if err != nil {
				return v, err
			}
			v.Blocks = append(v.Blocks, bv)
		}
	}
	if !found {
		return v, fmt.Errorf("%w: no pool holds %s", allocator.ErrPoolNotFound, q)
	}
	return v, nil
}

// describeBlock spells out every allocation of b with its handle.
func describeBlock(ctx context.Context, a *allocator.Allocator, p ipam.Pool, b ipam.Block) (blockView, error) {
	v := blockView{CIDR: b.CIDR.String(), Pool: p.Name, Node: b.Node, Size: b.Size(), InUse: b.InUse(),
		Free: b.FreeCount(p), Allocations: []allocView{}}
	allocs := b.Allocations()
	keys := make([]string, len(allocs))
	for i, al := range allocs {
		keys[i] = allocator.HandleKey(al.Handle)
	}
	if len(keys) == 0 {
		return v, nil
	}
	es, err := a.Store().Get(ctx, keys...)
	if err != nil {
		return v, err
	}
	for i, al := range allocs {
		av := allocView{Addr: al.Addr.String(), Handle: al.Handle, NoRecord: es[i].Version == 0}
		var h ipam.Handle
		if es[i].Version != 0 && json.Unmarshal(es[i].Value, &h) == nil {
			av.Namespace, av.Pod, av.Node, av.Created = h.Namespace, h.Pod, h.Node, h.Created
		}
		v.Allocations = append(v.Allocations, av)
	}
	return v, nil
}

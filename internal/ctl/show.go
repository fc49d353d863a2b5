package ctl

import (
	"fmt"
	"io"
	"maps"
	"slices"

	"github.com/spf13/cobra"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

type poolUsage struct {
	Name string `json:"name"`
	CIDR string `json:"cidr"`
	// Total counts the addresses the pool may hand out (network,
	// broadcast, gateway, excluded and out-of-range addresses are not).
	Total uint64 `json:"total"`
	// InUse counts allocated addresses (an imported allocation of an
	// address the pool would not hand out counts too).
	InUse uint64 `json:"inUse"`
	// Free counts the addresses the pool can still hand out.
	Free uint64 `json:"free"`
}

type blockUsage struct {
	CIDR  string `json:"cidr"`
	Pool  string `json:"pool"`
	Node  string `json:"node"`
	Size  int    `json:"size"`
	InUse int    `json:"inUse"`
	Free  int    `json:"free"`
}

type nodeUsage struct {
	Node string `json:"node"`
	// Blocks counts the blocks affine to the node.
	Blocks int `json:"blocks"`
	// InUse counts the addresses held by handles of the node.
	InUse int `json:"inUse"`
}

type showView struct {
	Pools  []poolUsage  `json:"pools"`
	Blocks []blockUsage `json:"blocks,omitzero"`
	Nodes  []nodeUsage  `json:"nodes,omitzero"`
}

func (v showView) table(w io.Writer) {
	row(w, "POOL", "CIDR", "TOTAL", "IN USE", "FREE")
	for _, p := range v.Pools {
		row(w, p.Name, p.CIDR, num(p.Total), num(p.InUse), num(p.Free))
	}
	if v.Blocks != nil {
		fmt.Fprintln(w)
		row(w, "BLOCK", "POOL", "NODE", "IN USE", "FREE")
		for _, b := range v.Blocks {
			row(w, b.CIDR, b.Pool, dash(b.Node), fmt.Sprintf("%d/%d", b.InUse, b.Size), num(b.Free))
		}
	}
	if v.Nodes != nil {
		fmt.Fprintln(w)
		row(w, "NODE", "BLOCKS", "IN USE")
		for _, n := range v.Nodes {
			row(w, dash(n.Node), num(n.Blocks), num(n.InUse))
		}
	}
}

func (c *cli) showCmd() *cobra.Command {
	var blocks, nodes bool
	var pool string
	cmd := &cobra.Command{
		Use:   "show",
		Short: "Utilization: per pool TOTAL / IN USE / FREE, per block (--blocks), per node (--nodes)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return c.withStore(cmd.Context(), func(a *allocator.Allocator) error {
				v, err := usage(cmd, a, pool, blocks, nodes)
				if err != nil {
					return err
				}
				return c.print(v)
			})
		},
	}
	cmd.Flags().BoolVar(&blocks, "blocks", false, "also list every claimed block: CIDR, pool, node, addresses in use")
	cmd.Flags().BoolVar(&nodes, "nodes", false, "also list every node: blocks affine to it, addresses its handles hold")
	cmd.Flags().StringVar(&pool, "pool", "", "show only this pool")
	return cmd
}

func usage(cmd *cobra.Command, a *allocator.Allocator, only string, withBlocks, withNodes bool) (showView, error) {
	ctx := cmd.Context()
	pools, err := a.Pools(ctx)
	if err != nil {
		return showView{}, err
	}
	if only != "" {
		pools = slices.DeleteFunc(pools, func(p ipam.Pool) bool { return p.Name != only })
		if len(pools) == 0 {
			return showView{}, fmt.Errorf("%w: %q", allocator.ErrPoolNotFound, only)
		}
	}
	v := showView{Pools: []poolUsage{}}
	if withBlocks {
		v.Blocks = []blockUsage{}
	}
	sel := store.ClaimSelector{Pool: only}
	claimed, err := readClaimed(ctx, a.Store(), sel)
	if err != nil {
		return showView{}, err
	}
	byPool := map[string][]claimedBlock{}
	for _, cb := range claimed {
		byPool[cb.Claim.Pool] = append(byPool[cb.Claim.Pool], cb)
	}
	affine := map[string]int{}
	for _, p := range pools {
		bs := byPool[p.Name]
		u := poolUsage{Name: p.Name, CIDR: p.CIDR.String(), Total: p.Usable()}
		var permitted, free uint64
		slices.SortFunc(bs, func(x, y claimedBlock) int { return x.Claim.CIDR.Addr().Compare(y.Claim.CIDR.Addr()) })
		for _, cb := range bs {
			b := cb.Block
			permitted += uint64(p.PermittedIn(b.CIDR))
			free += uint64(cb.freeCount(p))
			u.InUse += uint64(b.InUse())
			node := shownNode(cb.Claim.Node)
			if node != "" {
				affine[node]++
			}
			if withBlocks {
				v.Blocks = append(v.Blocks, blockUsage{CIDR: b.CIDR.String(), Pool: p.Name, Node: node,
					Size: b.Size(), InUse: b.InUse(), Free: cb.freeCount(p)})
			}
		}
		// Unclaimed blocks are free as a whole.
		u.Free = free
		if u.Total > permitted {
			u.Free += u.Total - permitted
		}
		v.Pools = append(v.Pools, u)
	}
	if withNodes {
		hs, err := shownHandles(ctx, a)
		if err != nil {
			return showView{}, err
		}
		names := map[string]bool{}
		held := map[string]int{}
		for _, h := range hs {
			for _, ip := range h.IPs {
				if only == "" || ip.Pool == only {
					held[h.Node]++
					names[h.Node] = true
				}
			}
		}
		for n := range affine {
			names[n] = true
		}
		v.Nodes = []nodeUsage{}
		for _, n := range slices.Sorted(maps.Keys(names)) {
			v.Nodes = append(v.Nodes, nodeUsage{Node: n, Blocks: affine[n], InUse: held[n]})
		}
	}
	return v, nil
}

package ctl

import (
	"fmt"
	"io"
	"net/netip"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/labels"
)

// poolView is a pool as ipkeeperctl prints it.
type poolView struct {
	Name           string   `json:"name"`
	CIDR           string   `json:"cidr"`
	BlockSize      int      `json:"blockSize"`
	RangeStart     string   `json:"rangeStart,omitempty"`
	RangeEnd       string   `json:"rangeEnd,omitempty"`
	Gateway        string   `json:"gateway,omitempty"`
	Exclude        []string `json:"exclude,omitempty"`
	NodeSelector   string   `json:"nodeSelector,omitempty"`
	Disabled       bool     `json:"disabled"`
	StrictAffinity bool     `json:"strictAffinity"`
	Sticky         bool     `json:"sticky"`
	// Deleting is set while (or after an interrupted) pool rm.
	Deleting bool   `json:"deleting,omitempty"`
	Origin   string `json:"origin,omitempty"`
}

func newPoolView(p ipam.Pool) poolView {
	v := poolView{Name: p.Name, CIDR: p.CIDR.String(), BlockSize: p.BlockSize, NodeSelector: p.NodeSelector,
		Disabled: p.Disabled, StrictAffinity: p.StrictAffinity, Sticky: p.Sticky, Deleting: p.Deleting, Origin: p.Origin}
	if p.RangeStart.IsValid() {
		v.RangeStart = p.RangeStart.String()
	}
	if p.RangeEnd.IsValid() {
		v.RangeEnd = p.RangeEnd.String()
	}
	if p.Gateway.IsValid() {
		v.Gateway = p.Gateway.String()
	}
	for _, x := range p.Exclude {
		v.Exclude = append(v.Exclude, x.String())
	}
	return v
}

type poolList struct {
	Pools []poolView `json:"pools"`
}

func (l poolList) table(w io.Writer) {
	row(w, "NAME", "CIDR", "BLOCK", "RANGE", "GATEWAY", "EXCLUDE", "NODE SELECTOR", "FLAGS", "ORIGIN")
	for _, p := range l.Pools {
		rng := "-"
		if p.RangeStart != "" || p.RangeEnd != "" {
			rng = dash(p.RangeStart) + "-" + dash(p.RangeEnd)
		}
		var flags []string
		if p.Disabled {
			flags = append(flags, "disabled")
		}
		if p.StrictAffinity {
			flags = append(flags, "strict-affinity")
		}
		if p.Sticky {
			flags = append(flags, "sticky")
		}
		if p.Deleting {
			flags = append(flags, "deleting")
		}
		row(w, p.Name, p.CIDR, fmt.Sprintf("/%d", p.BlockSize), rng, dash(p.Gateway), dash(strings.Join(p.Exclude, ",")),
			dash(p.NodeSelector), dash(strings.Join(flags, ",")), dash(p.Origin))
	}
}

type poolRemoved struct {
	Removed string `json:"removed"`
}

func (r poolRemoved) table(w io.Writer) { fmt.Fprintf(w, "pool %s removed\n", r.Removed) }

func (c *cli) poolCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "pool", Short: "Add, list and remove pools"}
	cmd.AddCommand(c.poolAddCmd(), c.poolListCmd(), c.poolSetCmd(), c.poolRmCmd())
	return cmd
}

func (c *cli) poolAddCmd() *cobra.Command {
	var (
		cidr, selector, rangeStart, rangeEnd, gateway string
		blockSize                                     int
		exclude                                       []string
		disabled, strict, sticky, allowOverlap        bool
	)
	cmd := &cobra.Command{
		Use:   "add NAME --cidr CIDR",
		Short: "Add a pool that network configs name in \"pools\"",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := ValidPoolName(args[0]); err != nil {
				return fmt.Errorf("pool add NAME: %w", err)
			}
			p := ipam.Pool{Name: args[0], BlockSize: blockSize, NodeSelector: selector, Disabled: disabled,
				StrictAffinity: strict, Sticky: sticky, Origin: "cli"}
			var err error
			if p.CIDR, err = netip.ParsePrefix(cidr); err != nil {
				return fmt.Errorf("--cidr %q: %w", cidr, err)
			}
			if p.CIDR != p.CIDR.Masked() {
				return fmt.Errorf("--cidr %s has host bits set: did you mean %s?", p.CIDR, p.CIDR.Masked())
			}
			if blockSize == 0 {
				// As for a configured range: the default, or the whole
				// pool as one block when it is smaller.
				p.BlockSize = ipam.BlockSizeFor(p.CIDR, 0, 0)
			}
			for _, f := range []struct {
				flag, val string
				dst       *netip.Addr
			}{{"--range-start", rangeStart, &p.RangeStart}, {"--range-end", rangeEnd, &p.RangeEnd}, {"--gateway", gateway, &p.Gateway}} {
				if f.val == "" {
					continue
				}
				if *f.dst, err = netip.ParseAddr(f.val); err != nil {
					return fmt.Errorf("%s %q: %w", f.flag, f.val, err)
				}
			}
			for _, x := range exclude {
				px, err := netip.ParsePrefix(x)
				if err != nil {
					a, aerr := netip.ParseAddr(x)
					if aerr != nil {
						return fmt.Errorf("--exclude %q: want a CIDR or an address", x)
					}
					px = netip.PrefixFrom(a, a.BitLen())
				}
				p.Exclude = append(p.Exclude, px.Masked())
			}
			if _, err := labels.Parse(selector); err != nil {
				return fmt.Errorf("--node-selector %q: %w", selector, err)
			}
			if err := p.Validate(); err != nil {
				return err
			}
			return c.withStore(cmd.Context(), func(a *allocator.Allocator) error {
				if !allowOverlap {
					pools, err := a.Pools(cmd.Context())
					if err != nil {
						return err
					}
					for _, q := range pools {
						if q.Name != p.Name && q.CIDR.Overlaps(p.CIDR) {
							return fmt.Errorf("pool %s (%s) overlaps %s: a network using both could hand out one address twice; pass --allow-overlap when they serve different networks", q.Name, q.CIDR, p.CIDR)
						}
					}
				}
				if err := a.CreatePool(cmd.Context(), p); err != nil {
					return err
				}
				return c.print(poolList{Pools: []poolView{newPoolView(p)}})
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&cidr, "cidr", "", "the pool's CIDR (required)")
	f.IntVar(&blockSize, "block-size", 0, "prefix length of the pool's blocks (default /26 for IPv4, /122 for IPv6, or the pool's own when smaller)")
	f.StringVar(&selector, "node-selector", "", "Kubernetes label selector of the nodes that may use the pool")
	f.BoolVar(&disabled, "disabled", false, "create the pool disabled: it hands out nothing new")
	f.BoolVar(&strict, "strict-affinity", false, "never borrow addresses from other nodes' blocks")
	f.BoolVar(&sticky, "sticky", false, "keep the addresses of StatefulSet pods and KubeVirt VMs for their identity when their pod goes away")
	f.StringVar(&rangeStart, "range-start", "", "first address to hand out")
	f.StringVar(&rangeEnd, "range-end", "", "last address to hand out")
	f.StringVar(&gateway, "gateway", "", "gateway returned with every address, never handed out")
	f.StringSliceVar(&exclude, "exclude", nil, "CIDRs or addresses never handed out (repeatable)")
	f.BoolVar(&allowOverlap, "allow-overlap", false, "allow a CIDR that overlaps another pool's (for pools of different networks)")
	_ = cmd.MarkFlagRequired("cidr")
	return cmd
}

func (c *cli) poolListCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List pools",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return c.withStore(cmd.Context(), func(a *allocator.Allocator) error {
				pools, err := a.Pools(cmd.Context())
				if err != nil {
					return err
				}
				l := poolList{Pools: []poolView{}}
				for _, p := range pools {
					l.Pools = append(l.Pools, newPoolView(p))
				}
				return c.print(l)
			})
		},
	}
}

func (c *cli) poolSetCmd() *cobra.Command {
	var sticky bool
	cmd := &cobra.Command{
		Use:   "set NAME --sticky=true|false",
		Short: "Change a pool's flags",
		Long: `Change a flag of an existing pool, also one a network config defined
(a config never resets it). --sticky: the addresses of StatefulSet pods
and KubeVirt virtual machines drawn from the pool stay reserved for their
identity when their pod goes away (a pod's or namespace's
ipkeeper.io/sticky annotation still decides first); it applies to pods
whose ADD comes after it.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !cmd.Flags().Changed("sticky") {
				return fmt.Errorf("pool set %s: name a flag to change (--sticky=true|false)", args[0])
			}
			return c.withStore(cmd.Context(), func(a *allocator.Allocator) error {
				p, err := a.SetPoolSticky(cmd.Context(), args[0], sticky)
				if err != nil {
					return err
				}
				return c.print(poolList{Pools: []poolView{newPoolView(p)}})
			})
		},
	}
	cmd.Flags().BoolVar(&sticky, "sticky", false, "keep the addresses of StatefulSet pods and KubeVirt VMs for their identity when their pod goes away")
	return cmd
}

func (c *cli) poolRmCmd() *cobra.Command {
	var cancel bool
	cmd := &cobra.Command{
		Use:   "rm NAME",
		Short: "Remove a pool; refused while any of its addresses is in use",
		Long: `Remove a pool with its (empty) blocks. It is refused while any of its
addresses is in use, and the pool stays usable. The pool is first marked
as being removed, which stops allocations from it; a removal that is
interrupted leaves it marked: run 'pool rm NAME' again to finish it, or
'pool rm --cancel NAME' to keep the pool.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return c.withStore(cmd.Context(), func(a *allocator.Allocator) error {
				if cancel {
					was, err := a.CancelPoolRemoval(cmd.Context(), args[0])
					if err != nil {
						return err
					}
					return c.print(poolKept{Kept: args[0], WasBeingRemoved: was})
				}
				if err := a.DeletePool(cmd.Context(), args[0]); err != nil {
					return err
				}
				return c.print(poolRemoved{Removed: args[0]})
			})
		},
	}
	cmd.Flags().BoolVar(&cancel, "cancel", false, "keep a pool an interrupted 'pool rm' left marked as being removed")
	return cmd
}

type poolKept struct {
	Kept            string `json:"kept"`
	WasBeingRemoved bool   `json:"wasBeingRemoved"`
}

func (r poolKept) table(w io.Writer) {
	if r.WasBeingRemoved {
		fmt.Fprintf(w, "pool %s kept: its removal is cancelled\n", r.Kept)
		return
	}
	fmt.Fprintf(w, "pool %s kept: it was not being removed\n", r.Kept)
}

// maxPoolNameLength is the longest pool name, as for names in a network
// config's ipam.pools.
const maxPoolNameLength = 253

// ValidPoolName checks a pool name given on the command line: a network
// config must be able to name it in ipam.pools, so it is non-empty valid
// UTF-8 of at most 253 bytes without '/', spaces or control characters.
// Every name ipkeeper gives the pools of a config's ranges (network name,
// CIDR and range with '/' and ':' as '-') passes.
func ValidPoolName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("pool name is empty")
	case len(name) > maxPoolNameLength:
		return fmt.Errorf("pool name %.20q... is %d bytes, more than %d", name, len(name), maxPoolNameLength)
	case !utf8.ValidString(name):
		return fmt.Errorf("pool name %q is not valid UTF-8", name)
	}
	if i := strings.IndexFunc(name, func(r rune) bool {
		return r == '/' || unicode.IsSpace(r) || unicode.IsControl(r) || r == utf8.RuneError
	}); i >= 0 {
		return fmt.Errorf("pool name %q contains %q at byte %d: no config can name it; use letters, digits and . _ : -", name, []rune(name[i:])[0], i)
	}
	return nil
}

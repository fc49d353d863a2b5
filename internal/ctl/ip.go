package ctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

// handleView is a handle as ipkeeperctl prints it.
type handleView struct {
	ID          string    `json:"id"`
	Network     string    `json:"network,omitempty"`
	ContainerID string    `json:"containerID,omitempty"`
	IfName      string    `json:"ifname,omitempty"`
	Node        string    `json:"node,omitempty"`
	NetNS       string    `json:"netns,omitempty"`
	Namespace   string    `json:"namespace,omitempty"`
	Pod         string    `json:"pod,omitempty"`
	PodUID      string    `json:"podUID,omitempty"`
	Created     time.Time `json:"created,omitzero"`
	// Sticky is the identity the addresses stay reserved for; Parked is
	// when its pod went away (zero while one uses them).
	Sticky string    `json:"sticky,omitempty"`
	Parked time.Time `json:"parked,omitzero"`
}

func newHandleView(h ipam.Handle) *handleView {
	return &handleView{ID: h.ID, Network: h.Network, ContainerID: h.ContainerID, IfName: h.IfName, Node: h.Node,
		NetNS: h.NetNS, Namespace: h.Namespace, Pod: h.Pod, PodUID: h.PodUID, Created: h.Created, Sticky: h.Sticky, Parked: h.Parked}
}

// stickyNote is what a table adds to a handle of a sticky identity: the
// identity, and since when no pod holds it.
func stickyNote(sticky string, parked time.Time) string {
	switch {
	case sticky == "":
		return ""
	case parked.IsZero():
		return " (sticky " + sticky + ")"
	}
	return " (sticky " + sticky + ", reserved, no pod since " + since(parked) + ")"
}

// Address states of ip show.
const (
	stateAllocated = "allocated"
	stateFree      = "free"
	stateReserved  = "reserved"  // the pool never hands it out
	stateUnclaimed = "unclaimed" // its block is not claimed by any node
)

// holding is what one pool says about an address.
type holding struct {
	Pool      string `json:"pool"`
	Block     string `json:"block"`
	BlockNode string `json:"blockNode,omitempty"`
	State     string `json:"state"`
	// HandleID names the owner when allocated; Handle is its record, nil
	// when the record is missing.
	HandleID string      `json:"handleID,omitempty"`
	Handle   *handleView `json:"handle,omitempty"`
}

type ipView struct {
	Addr     string    `json:"addr"`
	Holdings []holding `json:"holdings"`
}

func (v ipView) table(w io.Writer) {
	row(w, "ADDRESS", "POOL", "BLOCK", "STATE", "HANDLE", "POD", "NODE", "SINCE")
	for _, h := range v.Holdings {
		handle, pod, node, created := dash(h.HandleID), "-", dash(h.BlockNode), "-"
		if h.HandleID != "" && h.Handle == nil {
			handle += " (no record)"
		}
		if h.Handle != nil {
			pod, node, created = podName(h.Handle.Namespace, h.Handle.Pod), dash(h.Handle.Node), since(h.Handle.Created)
			handle += stickyNote(h.Handle.Sticky, h.Handle.Parked)
		}
		row(w, v.Addr, h.Pool, h.Block, h.State, handle, pod, node, created)
	}
}

func (c *cli) ipCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "ip", Short: "Look up and release single addresses"}
	cmd.AddCommand(c.ipShowCmd(), c.ipReleaseCmd())
	return cmd
}

func parseAddr(s string) (netip.Addr, error) {
	a, err := netip.ParseAddr(s)
	if err != nil {
		return a, fmt.Errorf("%q is not an IP address", s)
	}
	return a.Unmap(), nil
}

// lookup returns what every pool holding addr says about it: the claim
// of the address's block and, from the object of the node it names, the
// block's owner of the address and that handle's record.
func lookup(ctx context.Context, a *allocator.Allocator, addr netip.Addr, only string) ([]holding, error) {
	pools, err := a.Pools(ctx)
	if err != nil {
		return nil, err
	}
	var out []holding
	for _, p := range pools {
		if !p.CIDR.Contains(addr) || only != "" && p.Name != only {
			continue
		}
		cidr, _ := addr.Prefix(p.BlockSize)
		h := holding{Pool: p.Name, Block: cidr.String()}
		cb, claimed, err := readClaim(ctx, a.Store(), store.BlockRef{Pool: p.Name, CIDR: cidr})
		if err != nil {
			return nil, err
		}
		owner, rec := cb.record(ordinal(cidr, addr))
		switch {
		case claimed && owner != "":
			h.State, h.HandleID, h.BlockNode = stateAllocated, owner, shownNode(cb.Claim.Node)
			if rec != nil {
				h.Handle = newHandleView(*rec)
			}
		case !p.Permits(addr):
			h.State, h.BlockNode = stateReserved, shownNode(cb.Claim.Node)
		case !claimed:
			h.State = stateUnclaimed
		default:
			h.State, h.BlockNode = stateFree, shownNode(cb.Claim.Node)
		}
		out = append(out, h)
	}
	if len(out) == 0 {
		if only != "" {
			return nil, fmt.Errorf("%w: pool %q does not hold %s", allocator.ErrPoolNotFound, only, addr)
		}
		return nil, fmt.Errorf("%w: no pool holds %s", allocator.ErrPoolNotFound, addr)
	}
	return out, nil
}

func ordinal(cidr netip.Prefix, a netip.Addr) int {
	ord, err := (ipam.Block{CIDR: cidr}).Ordinal(a)
	if err != nil {
		return -1
	}
	return ord
}

func (c *cli) ipShowCmd() *cobra.Command {
	var pool string
	cmd := &cobra.Command{
		Use:   "show IP",
		Short: "Which handle, pod and node hold an address, and since when",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			addr, err := parseAddr(args[0])
			if err != nil {
				return err
			}
			return c.withStore(cmd.Context(), func(a *allocator.Allocator) error {
				hs, err := lookup(cmd.Context(), a, addr, pool)
				if err != nil {
					return err
				}
				return c.print(ipView{Addr: addr.String(), Holdings: hs})
			})
		},
	}
	cmd.Flags().StringVar(&pool, "pool", "", "look only in this pool")
	return cmd
}

type releasedView struct {
	Addr   string      `json:"addr"`
	Pool   string      `json:"pool"`
	Handle *handleView `json:"handle"`
	Forced bool        `json:"forced"`
}

func (v releasedView) table(w io.Writer) {
	fmt.Fprintf(w, "released %s (pool %s) from handle %s\n", v.Addr, v.Pool, v.Handle.ID)
}

func (c *cli) ipReleaseCmd() *cobra.Command {
	var (
		force bool
		pool  string
		kf    kubeFlags
	)
	cmd := &cobra.Command{
		Use:   "release IP [--force] [--kubeconfig FILE]",
		Short: "Release one address; refused while its owner is live unless --force",
		Long: `Release one address and drop it from the handle that holds it.

The owner counts as live while its handle exists and either its network
namespace still exists (when run on the handle's node) or that cannot be
checked (the handle is on another node, or recorded no namespace). A live
owner's address is released only with --force. An address whose handle
record is missing has no live owner.

With --kubeconfig, an owner that records a Kubernetes pod is live while the
API shows that pod (same namespace, name and UID) not finished, on a node
that exists, and the allocation is not an older sandbox of it (see
'ipkeeperctl leaks'); owners without a pod are judged as above.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			addr, err := parseAddr(args[0])
			if err != nil {
				return err
			}
			return c.withStore(cmd.Context(), func(a *allocator.Allocator) error {
				node, err := c.nodeName()
				if err != nil && !force {
					return err
				}
				hs, err := lookup(cmd.Context(), a, addr, pool)
				if err != nil {
					return err
				}
				var held []holding
				for _, h := range hs {
					if h.State == stateAllocated {
						held = append(held, h)
					}
				}
				switch {
				case len(held) == 0:
					return fmt.Errorf("%w: %s is %s", allocator.ErrNotAllocated, addr, hs[0].State)
				case len(held) > 1:
					var names []string
					for _, h := range held {
						names = append(names, h.Pool)
					}
					return fmt.Errorf("%s is allocated in pools %s: say which with --pool", addr, strings.Join(names, ", "))
				}
				h := held[0]
				live, why := c.liveness(h, node)
				if kf.kubeconfig != "" && h.Handle != nil && h.Handle.Pod != "" {
					hs, err := shownHandles(cmd.Context(), a)
					if err != nil {
						return err
					}
					i := slices.IndexFunc(hs, func(x ipam.Handle) bool { return x.ID == h.HandleID })
					if i < 0 {
						return fmt.Errorf("%s changed hands while checking it, nothing released: run the command again", addr)
					}
					var known bool
					live, known, why, err = kf.podLiveness(cmd.Context(), hs[i], hs)
					if err != nil && !force {
						return fmt.Errorf("cannot tell whether the pod holding %s is live (use --force to release it anyway): %w", addr, err)
					}
					if !known {
						live, why = c.liveness(h, node)
					} else if live {
						why = "it is held by handle " + h.HandleID + ": " + why
					}
				}
				if live && !force {
					return fmt.Errorf("refusing to release %s: %s; use --force to release it anyway", addr, why)
				}
				owner, err := a.ReleaseAddrHeldBy(cmd.Context(), h.Pool, addr, h.HandleID)
				if errors.Is(err, allocator.ErrHolderChanged) || errors.Is(err, store.ErrConflict) {
					return fmt.Errorf("%s changed hands while releasing it, nothing released: run the command again: %w", addr, err)
				}
				if err != nil {
					return err
				}
				return c.print(releasedView{Addr: addr.String(), Pool: h.Pool, Handle: newHandleView(shownHandle(owner)), Forced: force})
			})
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "release even when the owner may be live")
	cmd.Flags().StringVar(&pool, "pool", "", "the pool of the address, when pools overlap")
	kf.register(cmd.Flags())
	return cmd
}

// liveness says whether the owner of an allocated address may be live,
// and why: its handle exists and it is not provably gone (see ownerGone).
func (c *cli) liveness(h holding, node string) (bool, string) {
	if h.Handle == nil {
		return false, ""
	}
	gone, why := c.ownerGone(ipam.Handle{Node: h.Handle.Node, NetNS: h.Handle.NetNS}, node)
	if gone {
		return false, ""
	}
	who := "handle " + h.HandleID
	if h.Handle.Pod != "" {
		who += " (pod " + podName(h.Handle.Namespace, h.Handle.Pod) + ")"
	}
	return true, fmt.Sprintf("it is held by %s and %s", who, why)
}

package ctl

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strings"

	"github.com/spf13/cobra"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/consistency"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

type checkView struct {
	consistency.Report
	// Kubernetes is what the API says about the allocations, with
	// --kubeconfig.
	Kubernetes *kubeCheck `json:"kubernetes,omitempty"`
}

// kubeCheck lists the leaked allocations check found against the API.
type kubeCheck struct {
	Pods  int         `json:"pods"`
	Nodes int         `json:"nodes"`
	Leaks []leakEntry `json:"leaks"`
}

func (k *kubeCheck) table(w io.Writer) {
	if k == nil {
		return
	}
	fmt.Fprintf(w, "\nkubernetes: %d pods, %d nodes: ", k.Pods, k.Nodes)
	if len(k.Leaks) == 0 {
		fmt.Fprintln(w, "no leaked addresses")
		return
	}
	fmt.Fprintf(w, "%d leaked allocations ('ipkeeperctl leaks --release' releases them; ipkeeper-controller does after its grace period)\n", len(k.Leaks))
	leakTable(w, k.Leaks, false)
}

func (v checkView) table(w io.Writer) {
	c := v.Counts
	fmt.Fprintf(w, "checked %d pools, %d block claims, %d node objects, %d blocks, %d handle records, %d allocated addresses: ",
		c.Pools, c.Claims, c.Nodes, c.Blocks, c.Handles, c.Allocated)
	if len(v.Problems) == 0 {
		fmt.Fprintln(w, "no problems")
	} else {
		fmt.Fprintf(w, "%d problems\n", len(v.Problems))
		problemTable(w, v.Problems)
	}
	if len(v.Findings) > 0 {
		fmt.Fprintf(w, "\n%d allocations inside reservations (the holders keep them; 'ipkeeperctl reserve list')\n", len(v.Findings))
		row(w, "KIND", "POOL", "RESERVATION", "ADDRESS", "HANDLE", "NODE", "DETAIL")
		for _, f := range v.Findings {
			row(w, string(f.Kind), f.Pool, f.Block, f.Addr, f.Handle, dash(f.Node), f.Detail)
		}
	}
	v.Kubernetes.table(w)
}

func problemTable(w io.Writer, ps []consistency.Problem) {
	row(w, "KIND", "POOL", "BLOCK", "ADDRESS", "HANDLE", "REPAIR", "DETAIL")
	for _, p := range ps {
		repair := "report only"
		if p.Repairable {
			repair = "--repair"
		}
		row(w, string(p.Kind), dash(p.Pool), dash(p.Block), dash(p.Addr), dash(p.Handle), repair, p.Detail)
	}
}

type repairView struct {
	consistency.RepairResult
	// Kubernetes lists leaked allocations (not repaired: see leaks).
	Kubernetes *kubeCheck `json:"kubernetes,omitempty"`
}

func (v repairView) table(w io.Writer) {
	defer v.Kubernetes.table(w)
	if len(v.Found) == 0 {
		fmt.Fprintln(w, "no problems")
		return
	}
	fmt.Fprintf(w, "found %d problems\n", len(v.Found))
	problemTable(w, v.Found)
	fmt.Fprintf(w, "\nrepaired (%d changes)\n", len(v.Actions))
	if len(v.Actions) > 0 {
		row(w, "KIND", "POOL", "BLOCK", "ADDRESS", "HANDLE", "DONE")
		for _, a := range v.Actions {
			row(w, string(a.Kind), dash(a.Pool), dash(a.Block), dash(a.Addr), dash(a.Handle), a.Did)
		}
	}
	if len(v.Remaining) == 0 {
		fmt.Fprintln(w, "\nno problems remain")
		return
	}
	fmt.Fprintf(w, "\n%d problems remain\n", len(v.Remaining))
	problemTable(w, v.Remaining)
}

func (c *cli) checkCmd() *cobra.Command {
	var (
		repair bool
		kf     kubeFlags
	)
	cmd := &cobra.Command{
		Use:   "check [--repair] [--kubeconfig FILE]",
		Short: "Check the datastore's consistency (and, with --kubeconfig, leaked addresses); --repair fixes what is provably safe",
		Long: `Check reads every pool, block claim and node object and reports: addresses
held by two handles, blocks held by two nodes or overlapping, blocks a node
holds without a claim (and claims whose node does not hold the block),
blocks claimed by another node than the one holding them, loans without
the lender's record (and records without the borrower's loan), blocks of
pools that do not exist, pools left marked by an interrupted 'pool rm', and
objects that cannot be read. A finding is reported only when a second read
of the objects involved shows it again. Without --repair nothing is
written.

--repair makes only changes that can neither hand out an address some
record still claims nor leave an address taken without a handle that can
release it, and prints each change. Problems it cannot decide (two handles
claiming a free address) are left for a person.

With --kubeconfig it also lists the leaked allocations, as 'ipkeeperctl
leaks' does (pod, node and why): pods that are gone, finished or recreated,
deleted nodes, older sandboxes. They count as problems; --repair does not
release them ('ipkeeperctl leaks --release' does, ipkeeper-controller does
after its grace period).

Exit status: 0 no problems, 2 problems found (and left), 3 problems found
and all repaired, 1 the check could not run.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			var (
				report consistency.Report
				result consistency.RepairResult
			)
			err := c.withStore(ctx, func(a *allocator.Allocator) error {
				var err error
				if repair {
					result, err = consistency.RepairStore(ctx, a.Store())
				} else {
					report, err = consistency.CheckStore(ctx, a.Store())
				}
				return err
			})
			if err != nil {
				return err
			}
			var kube *kubeCheck
			if kf.kubeconfig != "" {
				ls, view, pods, err := c.findLeaks(ctx, &kf)
				if err != nil {
					return err
				}
				kube = &kubeCheck{Pods: pods, Nodes: view.NodeCount(), Leaks: []leakEntry{}}
				for _, l := range ls {
					kube.Leaks = append(kube.Leaks, newLeakEntry(l.Leak))
				}
			}
			leaked := kube != nil && len(kube.Leaks) > 0
			if !repair {
				if err := c.print(checkView{Report: report, Kubernetes: kube}); err != nil {
					return err
				}
				if len(report.Problems) > 0 || leaked {
					return &exitError{code: ExitProblems, err: errSilent}
				}
				return nil
			}
			if err := c.print(repairView{RepairResult: result, Kubernetes: kube}); err != nil {
				return err
			}
			switch {
			case len(result.Remaining) > 0 || leaked:
				return &exitError{code: ExitProblems, err: errSilent}
			case len(result.Found) > 0:
				return &exitError{code: ExitRepaired, err: errSilent}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&repair, "repair", false, "fix what is provably safe and print what was done")
	kf.register(cmd.Flags())
	return cmd
}

type gcEntry struct {
	Handle    string   `json:"handle"`
	Namespace string   `json:"namespace,omitempty"`
	Pod       string   `json:"pod,omitempty"`
	NetNS     string   `json:"netns"`
	Addrs     []string `json:"addrs"`
}

type gcView struct {
	Node     string    `json:"node"`
	DryRun   bool      `json:"dryRun"`
	Released []gcEntry `json:"released"`
	// Kept counts this node's handles whose owners may be live.
	Kept int `json:"kept"`
	// Adopted lists the blocks ("pool/cidr") this node had claimed
	// without holding them (an ADD stopped after its claim), which gc
	// added to the node's object, empty, as its next ADD would.
	Adopted []string `json:"adopted,omitempty"`
}

func (v gcView) table(w io.Writer) {
	verb := "released"
	if v.DryRun {
		verb = "would release"
	}
	fmt.Fprintf(w, "node %s: %s %d handles, kept %d\n", v.Node, verb, len(v.Released), v.Kept)
	if len(v.Adopted) > 0 {
		fmt.Fprintf(w, "adopted %d claimed blocks: %s\n", len(v.Adopted), strings.Join(v.Adopted, ", "))
	}
	if len(v.Released) == 0 {
		return
	}
	row(w, "HANDLE", "POD", "NETNS", "ADDRESSES")
	for _, e := range v.Released {
		row(w, e.Handle, podName(e.Namespace, e.Pod), e.NetNS, dash(strings.Join(e.Addrs, ",")))
	}
}

func (c *cli) gcCmd() *cobra.Command {
	var dryRun bool
	cmd := &cobra.Command{
		Use:   "gc [--dry-run]",
		Short: "Release the allocations of this node whose owners are gone",
		Long: `gc releases every handle of this node (--node) whose container's network
namespace no longer exists, and prints what it released. Handles of other
nodes, sticky handles (their addresses stay with their identity: the
plugin's GC or the controller parks them), handles that recorded no
namespace, and namespaces that cannot be
seen from here (no /var/run/netns in this mount namespace) are kept. Each
handle is released as it was read: one allocated again meanwhile is kept.

It then adopts the blocks this node claimed but does not hold (what an ADD
killed after claiming leaves), as the node's next ADD would, so that
'ipkeeperctl check' finds the node's state whole.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return c.withStore(cmd.Context(), func(a *allocator.Allocator) error {
				ctx := cmd.Context()
				node, err := c.nodeName()
				if err != nil {
					return err
				}
				obs, err := a.ObserveHandles(ctx)
				if err != nil {
					return err
				}
				v := gcView{Node: node, DryRun: dryRun, Released: []gcEntry{}}
				for _, o := range obs {
					h := shownHandle(o.Handle)
					if h.Node != node {
						continue
					}
					if h.Sticky != "" {
						// Its addresses stay with its identity: the
						// plugin's GC or the controller parks it.
						v.Kept++
						continue
					}
					if gone, _ := c.ownerGone(h, node); !gone {
						v.Kept++
						continue
					}
					e := gcEntry{Handle: h.ID, Namespace: h.Namespace, Pod: h.Pod, NetNS: h.NetNS, Addrs: []string{}}
					addrs := handleAddrs(h)
					if !dryRun {
						if gone, _ := c.ownerGone(h, node); !gone { // it came back meanwhile
							v.Kept++
							continue
						}
						freed, err := a.ReleaseObserved(ctx, o)
						if errors.Is(err, allocator.ErrHandleChanged) {
							v.Kept++ // released or allocated again since it was read
							continue
						}
						if err != nil {
							return err
						}
						addrs = freed
					}
					for _, ip := range addrs {
						e.Addrs = append(e.Addrs, ip.String())
					}
					v.Released = append(v.Released, e)
				}
				if !dryRun && store.ValidName("node", node) == nil {
					adopted, err := a.AdoptClaims(ctx, node)
					if err != nil {
						return fmt.Errorf("adopt the blocks node %s claimed: %w", node, err)
					}
					for _, ref := range adopted {
						v.Adopted = append(v.Adopted, ref.String())
					}
				}
				return c.print(v)
			})
		},
	}
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "only print what would be released")
	return cmd
}

func handleAddrs(h ipam.Handle) []netip.Addr {
	out := make([]netip.Addr, 0, len(h.IPs))
	for _, ip := range h.IPs {
		out = append(out, ip.Addr)
	}
	return out
}

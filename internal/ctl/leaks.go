package ctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/leaks"
	"github.com/ipkeeper/ipkeeper/internal/store/kube"
)

// kubeFlags is --kubeconfig of the verbs that learn liveness from the
// Kubernetes API (check, ip release, leaks).
type kubeFlags struct{ kubeconfig string }

func (k *kubeFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&k.kubeconfig, "kubeconfig", "", "kubeconfig of the cluster whose pods and nodes decide which allocations are leaked")
}

// listPageSize bounds one page of a pod or node LIST.
const listPageSize = 500

// clusterView lists pods and every node (paged LISTs, never a GET per
// pod) and returns them as a leaks.Cluster, with the number of pods. With
// namespace and name it lists only that pod (a field selector). Call it
// after reading the handles: a handle is then never newer than the view.
func (k *kubeFlags) clusterView(ctx context.Context, namespace, name string) (*leaks.Snapshot, int, error) {
	cfg, err := kube.RESTConfig(k.kubeconfig)
	if err != nil {
		return nil, 0, fmt.Errorf("--kubeconfig: %w", err)
	}
	cfg.UserAgent = "ipkeeperctl"
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, 0, fmt.Errorf("--kubeconfig %s: %w", k.kubeconfig, err)
	}
	var pods []leaks.Pod
	sel := ""
	if name != "" {
		sel = "metadata.name=" + name
	}
	for cont := ""; ; {
		l, err := cs.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{Limit: listPageSize, Continue: cont, FieldSelector: sel})
		if err != nil {
			return nil, 0, fmt.Errorf("list pods: %w", err)
		}
		for i := range l.Items {
			pods = append(pods, leaks.PodFromAPI(&l.Items[i]))
		}
		if cont = l.Continue; cont == "" {
			break
		}
	}
	var nodes []string
	for cont := ""; ; {
		l, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{Limit: listPageSize, Continue: cont})
		if err != nil {
			return nil, 0, fmt.Errorf("list nodes: %w", err)
		}
		for _, n := range l.Items {
			nodes = append(nodes, n.Name)
		}
		if cont = l.Continue; cont == "" {
			break
		}
	}
	return leaks.NewSnapshot(pods, nodes), len(pods), nil
}

// findLeaks reads every handle (the datastore open only for that), then
// the API, and returns the leaks with their observations, the view and
// the number of pods seen.
func (c *cli) findLeaks(ctx context.Context, k *kubeFlags) ([]observedLeak, *leaks.Snapshot, int, error) {
	var obs []allocator.Observed
	err := c.withStore(ctx, func(a *allocator.Allocator) error {
		var err error
		obs, err = a.ObserveHandles(ctx)
		return err
	})
	if err != nil {
		return nil, nil, 0, err
	}
	view, pods, err := k.clusterView(ctx, "", "")
	if err != nil {
		return nil, nil, 0, err
	}
	return leaksOf(obs, view), view, pods, nil
}

// leaksOf returns the leaks among observed handles. A handle imported
// without a node (held in store.UnaffineNode's object) records no node, as
// leaks.Find expects. A sticky handle is never one: its addresses stay
// with its identity when its pod is gone (the controller parks it and
// frees it by the identity's lifecycle).
func leaksOf(obs []allocator.Observed, view leaks.Cluster) []observedLeak {
	var hs []ipam.Handle
	byKey := map[string]allocator.Observed{}
	for _, o := range obs {
		h := shownHandle(o.Handle)
		if h.Sticky != "" {
			continue
		}
		hs = append(hs, h)
		byKey[leaks.Key(h)] = o
	}
	var out []observedLeak
	for _, l := range leaks.Find(hs, view) {
		out = append(out, observedLeak{Leak: l, Obs: byKey[leaks.Key(l.Handle)]})
	}
	return out
}

// observedLeak is a leak and the observation of its handle.
type observedLeak struct {
	Leak leaks.Leak
	Obs  allocator.Observed
}

// leakEntry is one leaked allocation as ipkeeperctl prints it.
type leakEntry struct {
	Handle    string    `json:"handle"`
	Namespace string    `json:"namespace,omitempty"`
	Pod       string    `json:"pod,omitempty"`
	PodUID    string    `json:"podUID,omitempty"`
	Node      string    `json:"node,omitempty"`
	Addrs     []string  `json:"addrs"`
	Created   time.Time `json:"created,omitzero"`
	Reason    string    `json:"reason"`
	Detail    string    `json:"detail"`
	// Result says what --release did: "released", or why not.
	Result string `json:"result,omitempty"`
}

func newLeakEntry(l leaks.Leak) leakEntry {
	e := leakEntry{Handle: l.Handle.ID, Namespace: l.Handle.Namespace, Pod: l.Handle.Pod, PodUID: l.Handle.PodUID,
		Node: l.Node, Created: l.Handle.Created, Reason: string(l.Reason), Detail: l.Detail, Addrs: []string{}}
	for _, ip := range l.Handle.IPs {
		e.Addrs = append(e.Addrs, ip.Addr.String())
	}
	return e
}

func leakTable(w io.Writer, es []leakEntry, withResult bool) {
	cells := []string{"HANDLE", "POD", "UID", "NODE", "ADDRESSES", "REASON", "DETAIL"}
	if withResult {
		cells = append(cells, "RESULT")
	}
	row(w, cells...)
	for _, e := range es {
		cells := []string{e.Handle, podName(e.Namespace, e.Pod), dash(e.PodUID), dash(e.Node), dash(strings.Join(e.Addrs, ",")), e.Reason, e.Detail}
		if withResult {
			cells = append(cells, e.Result)
		}
		row(w, cells...)
	}
}

type leaksView struct {
	Pods    int         `json:"pods"`
	Nodes   int         `json:"nodes"`
	Grace   string      `json:"grace,omitempty"`
	Release bool        `json:"release"`
	Leaks   []leakEntry `json:"leaks"`
}

func (v leaksView) table(w io.Writer) {
	verb := "leaked"
	if v.Grace != "" {
		verb = "leaked for " + v.Grace
	}
	fmt.Fprintf(w, "%d pods, %d nodes: %d allocations %s\n", v.Pods, v.Nodes, len(v.Leaks), verb)
	if len(v.Leaks) > 0 {
		leakTable(w, v.Leaks, v.Release)
	}
}

func (c *cli) leaksCmd() *cobra.Command {
	var (
		kf      kubeFlags
		release bool
		grace   time.Duration
	)
	cmd := &cobra.Command{
		Use:   "leaks --kubeconfig FILE [--release] [--grace D]",
		Short: "List (or --release) allocations leaked by pods, nodes and sandboxes that are gone",
		Long: `leaks lists the allocations that ipkeeper-controller would release: held by a pod
that no longer exists (matched by namespace, name and the pod UID recorded at
ADD), that finished (Succeeded or Failed), that was recreated under its name
with another UID, or that runs on a deleted node; and older sandboxes of a
live pod (a newer allocation of the same pod UID, network and interface
exists and the old address is not in the pod's status.podIPs). Allocations
that record no pod are never listed: the controller releases those only when
it saw their node in the API and then saw it deleted, which one listing
cannot know. The handles are read first, then every pod and node (paged
LISTs).

--release releases them, each in one transaction guarded by the handle as
read: an allocation released, or released and made again, since it was read
is left alone. With --grace D the command reads twice, D apart, and acts only
on allocations leaked both times and unchanged (the controller's rule with
--leak-grace D); without it (the default, 0) it acts on one reading: use it
when the controller is not running or a pool is full now. A pod force-deleted
moments ago may still have its sandbox: give it --grace.

Exit status: 0 success (leaks or not), 1 failure.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if kf.kubeconfig == "" {
				return errors.New("leaks needs --kubeconfig: the Kubernetes API decides which pods are gone")
			}
			if grace < 0 {
				return fmt.Errorf("--grace %v: must not be negative", grace)
			}
			ctx := cmd.Context()
			ls, view, pods, err := c.observeLeaks(ctx, &kf, grace)
			if err != nil {
				return err
			}
			v := leaksView{Pods: pods, Nodes: view.NodeCount(), Release: release, Leaks: []leakEntry{}}
			if grace > 0 {
				v.Grace = grace.String()
			}
			if !release {
				for _, l := range ls {
					v.Leaks = append(v.Leaks, newLeakEntry(l.Leak))
				}
				return c.print(v)
			}
			err = c.withStore(ctx, func(a *allocator.Allocator) error {
				for _, l := range ls {
					e := newLeakEntry(l.Leak)
					freed, err := a.ReleaseObserved(ctx, l.Obs)
					switch {
					case errors.Is(err, allocator.ErrHandleChanged):
						e.Result = "kept: changed since it was read"
					case err != nil:
						return fmt.Errorf("release %s: %w", l.Leak.Handle.ID, err)
					default:
						e.Result = "released"
						e.Addrs = []string{}
						for _, a := range freed {
							e.Addrs = append(e.Addrs, a.String())
						}
					}
					v.Leaks = append(v.Leaks, e)
				}
				return nil
			})
			if err != nil {
				return err
			}
			return c.print(v)
		},
	}
	kf.register(cmd.Flags())
	cmd.Flags().BoolVar(&release, "release", false, "release the leaked allocations")
	cmd.Flags().DurationVar(&grace, "grace", 0, "read twice, this far apart, and list or release only what was leaked both times")
	return cmd
}

// observeLeaks returns the leaks of one reading, or with grace > 0 those
// of a second reading grace after the first that were leaked, unchanged,
// in both. The datastore is open only while it is read.
func (c *cli) observeLeaks(ctx context.Context, kf *kubeFlags, grace time.Duration) ([]observedLeak, *leaks.Snapshot, int, error) {
	var (
		ls    []observedLeak
		view  *leaks.Snapshot
		pods  int
		track = leaks.Tracker{Grace: grace}
	)
	readings := 1
	if grace > 0 {
		readings = 2
	}
	start := time.Now()
	for i := range readings {
		if i > 0 {
			select {
			case <-ctx.Done():
				return nil, nil, 0, ctx.Err()
			case <-time.After(time.Until(start.Add(grace))):
			}
		}
		var err error
		if ls, view, pods, err = c.findLeaks(ctx, kf); err != nil {
			return nil, nil, 0, err
		}
		keys := make([]string, len(ls))
		for j, l := range ls {
			keys[j] = leaks.Key(l.Leak.Handle)
		}
		now := time.Now()
		if i == 0 {
			now = start
		}
		confirmed, _ := track.Observe(now, keys)
		if i == readings-1 {
			ok := map[string]bool{}
			for _, k := range confirmed {
				ok[k] = true
			}
			out := ls[:0]
			for _, l := range ls {
				if ok[leaks.Key(l.Leak.Handle)] {
					out = append(out, l)
				}
			}
			ls = out
		}
	}
	return ls, view, pods, nil
}

// podLiveness says whether the Kubernetes API shows the pod of handle h
// live, for ip release: it is not among the leaks found over h and the
// other handles of its pod (hs), with only its pod and every node listed.
// known is false when h records no pod (the API cannot tell).
func (k *kubeFlags) podLiveness(ctx context.Context, h ipam.Handle, hs []ipam.Handle) (live, known bool, why string, err error) {
	if h.Namespace == "" || h.Pod == "" {
		return false, false, "", nil
	}
	view, _, err := k.clusterView(ctx, h.Namespace, h.Pod)
	if err != nil {
		return false, true, "", err
	}
	var same []ipam.Handle
	for _, o := range hs {
		if o.ID == h.ID || h.PodUID != "" && o.PodUID == h.PodUID {
			same = append(same, o)
		}
	}
	for _, l := range leaks.Find(same, view) {
		if l.Handle.ID == h.ID {
			return false, true, l.Detail, nil
		}
	}
	who := h.Namespace + "/" + h.Pod
	if p, ok := view.Pod(h.Namespace, h.Pod); ok && p.Phase != "" {
		who += " (" + p.Phase + ")"
	}
	return true, true, "pod " + who + " is live in the Kubernetes API", nil
}

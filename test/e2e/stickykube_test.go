package e2e

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/config"
	"github.com/ipkeeper/ipkeeper/internal/consistency"
	"github.com/ipkeeper/ipkeeper/internal/datastore"
	"github.com/ipkeeper/ipkeeper/internal/kubetest"
)

// TestStickyKubernetesDatastore runs the plugin binary on two nodes of
// the kubernetes datastore of a real kube-apiserver, each with its own
// node credentials (a token bound to a pod on the node, under deploy/'s
// RBAC and node-writes policy); the pool the config defines is made
// sticky by the admin (ipam.Pool.Sticky: no ipam.sticky, no annotation).
// A StatefulSet's pod parked on node-a and created again on node-b keeps
// its address. Then, round after round, the pod is deleted and created
// on the other node, its ADD racing its predecessor's DEL and the
// controller parking the predecessor's handle: the ADD gets the address
// or 102 (the predecessor still live), never two holders, and after the
// race the new pod holds the address alone, the store clean.
func TestStickyKubernetesDatastore(t *testing.T) {
	needIpkeeper(t)
	needKubeSibling(t)
	srv := kubetest.Start(t)
	f := &kubeFixture{srv: srv, cs: srv.Client}
	ctx := ctxT(t)
	if _, err := f.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "db"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"node-a", "node-b"} {
		if _, err := f.cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	sts := f.statefulSet(t, "db", "pg")
	owner := metav1.OwnerReference{APIVersion: "apps/v1", Kind: "StatefulSet", Name: sts.Name, UID: sts.UID, Controller: ptr(true)}
	confs := map[string][]byte{}
	for _, node := range []string{"node-a", "node-b"} {
		kc := srv.NodeKubeconfig(t, node)
		confs[node] = mustJSON(t, map[string]any{"cniVersion": "1.1.0", "name": "podnet", "type": "bridge",
			"ipam": map[string]any{"type": "ipkeeper", "nodeName": node,
				"datastore":  map[string]any{"type": "kubernetes", "kubeconfig": kc, "prefix": "sticky"},
				"kubernetes": map[string]any{"kubeconfig": kc},
				"ranges":     []any{[]any{map[string]any{"subnet": "10.71.0.0/24"}}}}})
	}
	// The admin's (the controller's) view of the datastore.
	st, err := datastore.Open(ctx, config.Datastore{Type: config.DatastoreKubernetes, Prefix: "sticky",
		Kubeconfig:  srv.ServiceAccountKubeconfig(t, "kube-system", "ipkeeper-controller"),
		DialTimeout: config.DefaultDialTimeout, RequestTimeout: config.DefaultRequestTimeout}, datastore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	a := allocator.New(st, nil)

	plain := f.ownedPod(t, "db", "web-1", "node-a", metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web", UID: "u-web", Controller: ptr(true)}, nil)
	addrsOf(t, confs["node-a"], runCNI(t, podCall("web-1", plain, confs["node-a"]))) // defines the pool
	pools, err := a.Pools(ctx)
	if err != nil || len(pools) != 1 {
		t.Fatalf("pools: %+v %v", pools, err)
	}
	if _, err := a.SetPoolSticky(ctx, pools[0].Name, true); err != nil {
		t.Fatal(err)
	}

	const id = "pod/db/pg-0"
	holders := func() []allocator.Observed {
		t.Helper()
		hs, err := a.StickyHolders(ctx, id, "podnet", "eth0")
		if err != nil {
			t.Fatal(err)
		}
		return hs
	}
	// clean checks the store. A move away from the node whose handle
	// borrowed the address leaves that node's loan: the new node's
	// credentials may not write another node's IPAMNode, so it is left
	// for 'ipkeeperctl check --repair' (repairable, no address involved);
	// anything else fails.
	var live []string
	clean := func() {
		t.Helper()
		rep, err := consistency.CheckStore(ctx, st)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range rep.Problems {
			if p.Kind != "loan-without-record" || !p.Repairable || slices.Contains(live, p.Handle) {
				t.Fatalf("check: %+v", rep.Problems)
			}
			t.Logf("left for check --repair: %s", p.Detail)
		}
	}
	node, other := "node-a", "node-b"
	pod := f.ownedPod(t, "db", "pg-0", node, owner, nil)
	container := "pg-a0"
	want := addrsOf(t, confs[node], runCNI(t, podCall(container, pod, confs[node])))
	if len(want) != 1 {
		t.Fatalf("first ADD: %v", want)
	}

	// Parked on node-a (its DEL), created again on node-b.
	del := podCall(container, pod, confs[node])
	del.Command = "DEL"
	if out := runCNI(t, del); out.ExitCode != 0 {
		t.Fatalf("DEL: %v", out)
	}
	f.deletePod(t, pod)
	node, other = other, node
	pod = f.ownedPod(t, "db", "pg-0", node, owner, nil)
	container = "pg-b0"
	if got := addrsOf(t, confs[node], runCNI(t, podCall(container, pod, confs[node]))); !slices.Equal(got, want) {
		t.Fatalf("recreated on %s: %v, want %v", node, got, want)
	}
	if hs := holders(); len(hs) != 1 || hs[0].Handle.Node != node || hs[0].Handle.IsParked() {
		t.Fatalf("holders after the move: %+v", hs)
	}
	clean()
	t.Logf("%s kept %v moving from %s to %s", id, want, other, node)

	for round := range 3 {
		prev, prevContainer := pod, container
		f.deletePod(t, prev) // no DEL yet: the kubelet's comes late
		node, other = other, node
		pod = f.ownedPod(t, "db", "pg-0", node, owner, nil)
		container = fmt.Sprintf("pg-%d", round)
		var wg sync.WaitGroup
		var addOut, delOut string
		var got []netip.Addr
		var addCode uint
		wg.Add(3)
		go func() { // the predecessor's DEL on its node
			defer wg.Done()
			d := podCall(prevContainer, prev, confs[other])
			d.Command = "DEL"
			if out := runCNI(t, d); out.ExitCode != 0 {
				delOut = out.String()
			}
		}()
		go func() { // the recreated pod's ADD
			defer wg.Done()
			out := runCNI(t, podCall(container, pod, confs[node]))
			if out.ExitCode == 0 {
				got = addrsOf(t, confs[node], out)
				return
			}
			if e, err := out.CNIError(); err == nil {
				addCode = e.Code
			}
			addOut = out.String()
		}()
		go func() { // the controller: the predecessor's pod is gone, its live handle is parked
			defer wg.Done()
			hs, err := a.StickyHolders(ctx, id, "podnet", "eth0")
			if err != nil {
				t.Error(err)
				return
			}
			for _, o := range hs {
				if o.Handle.PodUID == string(prev.UID) && !o.Handle.IsParked() {
					if err := a.ParkObserved(ctx, o, time.Now()); err != nil && !errors.Is(err, allocator.ErrHandleChanged) {
						t.Errorf("controller park: %v", err)
					}
				}
			}
		}()
		wg.Wait()
		if delOut != "" {
			t.Fatalf("round %d: DEL failed: %s", round, delOut)
		}
		switch {
		case addOut == "" && !slices.Equal(got, want):
			t.Fatalf("round %d: ADD on %s got %v, want %v", round, node, got, want)
		case addOut != "" && addCode != 102:
			t.Fatalf("round %d: ADD failed other than with 102: %s", round, addOut)
		case addOut != "":
			t.Logf("round %d: ADD met the live predecessor (102), retried", round)
			if got = addrsOf(t, confs[node], runCNI(t, podCall(container, pod, confs[node]))); !slices.Equal(got, want) {
				t.Fatalf("round %d: retried ADD on %s got %v, want %v", round, node, got, want)
			}
		}
		hs := holders()
		if len(hs) != 1 || hs[0].Handle.Node != node || hs[0].Handle.IsParked() || hs[0].Handle.PodUID != string(pod.UID) {
			t.Fatalf("round %d: holders %+v, want the new pod's live handle alone", round, hs)
		}
		live = []string{hs[0].Handle.ID}
		clean()
	}
}

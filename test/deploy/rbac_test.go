package deploy

import (
	"bufio"
	"context"
	"errors"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/ipkeeper/ipkeeper/internal/kubetest"
)

// grants is what RBAC must allow each shipped ServiceAccount, per
// namespace, beyond what every authenticated ServiceAccount may do: rows
// of `kubectl auth can-i --list` as "resource [resourceNames] [verbs]".
var grants = []struct {
	account   string
	namespace string
	rows      []string
}{
	{"ipkeeper-node", "kube-system", []string{
		"namespaces [] [get list watch]",
		"nodes [] [get list watch]",
		"pods [] [get list watch]",
	}},
	{"ipkeeper-node", "default", []string{
		"namespaces [] [get list watch]",
		"nodes [] [get list watch]",
		"pods [] [get list watch]",
	}},
	{"ipkeeper-controller", "kube-system", []string{
		"leases.coordination.k8s.io [] [create]",
		"leases.coordination.k8s.io [ipkeeper-controller] [get update]",
		"nodes [] [list watch]",
		"pods [] [list watch]",
		"statefulsets.apps [] [get]",
		"tokenreviews.authentication.k8s.io [] [create]",
		"virtualmachines.kubevirt.io [] [get]",
	}},
	{"ipkeeper-controller", "default", []string{
		"nodes [] [list watch]",
		"pods [] [list watch]",
		"statefulsets.apps [] [get]",
		"tokenreviews.authentication.k8s.io [] [create]",
		"virtualmachines.kubevirt.io [] [get]",
	}},
}

// datastoreGrants is what the ClusterRole ipkeeper-datastore
// (deploy/rbac-datastore.yaml) gives both accounts: the requests of the
// Kubernetes datastore (internal/store/kube) on its cluster-scoped CRDs,
// so the same rows in every namespace.
var datastoreGrants = []string{
	"ipamblocks.ipkeeper.io [] [create delete get list patch update]",
	"ipamnodes.ipkeeper.io [] [create delete get list update]",
	"ipampools.ipkeeper.io [] [create delete get list update watch]",
	"ipamreservations.ipkeeper.io [] [get list watch]",
}

// controllerStoreGrants is what the controller may do on the CRDs: the
// datastore's requests and, from its own ClusterRole
// (deploy/rbac-controller.yaml), a watch of the blocks, node heads and
// pools its view of the datastore follows.
var controllerStoreGrants = []string{
	"ipamblocks.ipkeeper.io [] [create delete get list patch update watch]",
	"ipamnodes.ipkeeper.io [] [create delete get list update watch]",
	"ipampools.ipkeeper.io [] [create delete get list update watch]",
	"ipamreservations.ipkeeper.io [] [get list watch]",
}

func init() {
	for i, g := range grants {
		switch g.account {
		case "ipkeeper-node":
			grants[i].rows = append(grants[i].rows, datastoreGrants...)
		case "ipkeeper-controller":
			grants[i].rows = append(grants[i].rows, controllerStoreGrants...)
		}
	}
}

// canIList returns the rows `kubectl auth can-i --list` prints for user in
// namespace, as "resource-or-URL [resourceNames] [verbs]".
func canIList(t *testing.T, s *kubetest.Server, user, namespace string) []string {
	t.Helper()
	out, err := exec.Command(kubectl(t), "--kubeconfig", s.AdminKubeconfig, "auth", "can-i", "--list",
		"--as="+user, "-n", namespace).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("kubectl auth can-i --list --as=%s: %v\n%s", user, err, ee.Stderr)
		}
		t.Fatal(err)
	}
	var rows []string
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	header := true
	for sc.Scan() {
		if header {
			header = false
			if !strings.HasPrefix(sc.Text(), "Resources") {
				t.Fatalf("unexpected kubectl auth can-i --list output:\n%s", out)
			}
			continue
		}
		// Columns: Resources, Non-Resource URLs, Resource Names, Verbs;
		// the first is blank for non-resource URLs, the lists are "[...]".
		f := splitColumns(sc.Text())
		if len(f) != 3 && len(f) != 4 {
			t.Fatalf("cannot read can-i row %q", sc.Text())
		}
		if len(f) == 3 { // a non-resource URL row: [url] [] [verbs]
			rows = append(rows, f[0]+" "+f[1]+" "+f[2])
			continue
		}
		rows = append(rows, f[0]+" "+f[2]+" "+sortedVerbs(f[3]))
	}
	sort.Strings(rows)
	return rows
}

// sortedVerbs returns a can-i verb list ("[watch get list]") sorted
// ("[get list watch]"): kubectl prints a resource's verbs in the order
// its rules grant them.
func sortedVerbs(list string) string {
	verbs := strings.Fields(strings.Trim(list, "[]"))
	sort.Strings(verbs)
	return "[" + strings.Join(verbs, " ") + "]"
}

// splitColumns splits a can-i row into its fields; bracketed lists stay
// one field even when they hold spaces ("[create patch]").
func splitColumns(line string) []string {
	var out []string
	for i := 0; i < len(line); {
		switch {
		case line[i] == ' ':
			i++
		case line[i] == '[':
			j := strings.IndexByte(line[i:], ']')
			if j < 0 {
				return append(out, line[i:])
			}
			out = append(out, line[i:i+j+1])
			i += j + 1
		default:
			j := strings.IndexByte(line[i:], ' ')
			if j < 0 {
				return append(out, line[i:])
			}
			out = append(out, line[i:i+j])
			i += j
		}
	}
	return out
}

// minus returns the rows of a that are not in b.
func minus(a, b []string) []string {
	var out []string
	for _, r := range a {
		if !slices.Contains(b, r) {
			out = append(out, r)
		}
	}
	return out
}

// TestRBACGrantsExactly: each shipped ServiceAccount may do exactly what
// its binary needs — compared with a ServiceAccount of the same namespace
// that has no binding (what every ServiceAccount may do: discovery, self
// reviews), nothing more and nothing less.
func TestRBACGrantsExactly(t *testing.T) {
	s := server(t)
	// A bindingless account in kube-system: the baseline.
	s.ServiceAccountToken(t, "kube-system", "ipkeeper-test-nobody")
	for _, g := range grants {
		t.Run(g.account+" in "+g.namespace, func(t *testing.T) {
			base := canIList(t, s, "system:serviceaccount:kube-system:ipkeeper-test-nobody", g.namespace)
			if len(base) == 0 {
				t.Fatal("the baseline account may do nothing at all; the can-i output was not read")
			}
			got := minus(canIList(t, s, "system:serviceaccount:kube-system:"+g.account, g.namespace), base)
			want := append([]string(nil), g.rows...)
			sort.Strings(want)
			if !slices.Equal(got, want) {
				t.Fatalf("%s may, in namespace %s, beyond any ServiceAccount:\n  %s\nwant exactly:\n  %s",
					g.account, g.namespace, strings.Join(got, "\n  "), strings.Join(want, "\n  "))
			}
		})
	}
}

func clientFromKubeconfig(t *testing.T, path string) kubernetes.Interface {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// makePod creates (as the admin) a namespace of its own holding one pod on
// a node, and the node; it returns the pod.
func makePod(t *testing.T, s *kubetest.Server, ns string) *corev1.Pod {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := s.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-" + ns, Labels: map[string]string{"zone": "a"}}}
	if _, err := s.Client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web-0", Namespace: ns, Annotations: map[string]string{"ipkeeper.io/pools": `["blue"]`}},
		Spec: corev1.PodSpec{NodeName: node.Name,
			Containers: []corev1.Container{{Name: "c", Image: "example.invalid/none"}}},
	}
	p, err := s.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil && apierrors.IsAlreadyExists(err) {
		p, err = s.Client.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
	}
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// checkNodeAccess checks what the plugin does with its kubeconfig (GET the
// pod, its namespace and its node) and what ipkeeper-agent's informers do
// (LIST the node's pods by spec.nodeName, the namespaces, the node by
// metadata.name) — and that it can do nothing else with them (no delete,
// update, no secrets).
func checkNodeAccess(t *testing.T, cs kubernetes.Interface, pod *corev1.Pod) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	got, err := cs.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("GET pod %s/%s as ipkeeper-node: %v", pod.Namespace, pod.Name, err)
	}
	if got.UID != pod.UID || got.Annotations["ipkeeper.io/pools"] != `["blue"]` {
		t.Fatalf("GET pod returned uid %s annotations %v", got.UID, got.Annotations)
	}
	if _, err := cs.CoreV1().Namespaces().Get(ctx, pod.Namespace, metav1.GetOptions{}); err != nil {
		t.Fatalf("GET namespace as ipkeeper-node: %v", err)
	}
	if _, err := cs.CoreV1().Nodes().Get(ctx, pod.Spec.NodeName, metav1.GetOptions{}); err != nil {
		t.Fatalf("GET node as ipkeeper-node: %v", err)
	}
	pods, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + pod.Spec.NodeName})
	if err != nil || len(pods.Items) == 0 {
		t.Fatalf("LIST pods of node %s as ipkeeper-node (the agent's informer): %v", pod.Spec.NodeName, err)
	}
	if _, err := cs.CoreV1().Namespaces().List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatalf("LIST namespaces as ipkeeper-node: %v", err)
	}
	if _, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + pod.Spec.NodeName}); err != nil {
		t.Fatalf("LIST node %s as ipkeeper-node: %v", pod.Spec.NodeName, err)
	}
	refused := map[string]error{}
	refused["delete pod"] = cs.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{})
	_, refused["patch pod"] = cs.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, []byte(`{"metadata":{"labels":{"x":"y"}}}`), metav1.PatchOptions{})
	_, refused["patch node"] = cs.CoreV1().Nodes().Patch(ctx, pod.Spec.NodeName, types.MergePatchType, []byte(`{"metadata":{"labels":{"x":"y"}}}`), metav1.PatchOptions{})
	_, refused["get secret"] = cs.CoreV1().Secrets("kube-system").Get(ctx, "anything", metav1.GetOptions{})
	for what, err := range refused {
		if !apierrors.IsForbidden(err) {
			t.Errorf("%s as ipkeeper-node: err = %v, want Forbidden", what, err)
		}
	}
}

// TestNodeAccountGetsPodButCannotDelete uses a kubeconfig for the
// ipkeeper-node ServiceAccount, as the plugin does.
func TestNodeAccountGetsPodButCannotDelete(t *testing.T) {
	s := server(t)
	pod := makePod(t, s, "rbac-node")
	checkNodeAccess(t, clientFromKubeconfig(t, s.ServiceAccountKubeconfig(t, "kube-system", "ipkeeper-node")), pod)
}

// TestControllerAccountRunsLeaderElection: as the ipkeeper-controller
// ServiceAccount, client-go's leader election on the Lease
// "ipkeeper-controller" in kube-system acquires the lease and renews it
// (create, get, update), and the informer's LIST and WATCH of pods and
// nodes work — while a single pod GET (never needed: informer cache only)
// and any other Lease are refused.
func TestControllerAccountRunsLeaderElection(t *testing.T) {
	s := server(t)
	pod := makePod(t, s, "rbac-controller")
	cs := clientFromKubeconfig(t, s.ServiceAccountKubeconfig(t, "kube-system", "ipkeeper-controller"))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Name: "ipkeeper-controller", Namespace: "kube-system"},
		Client:     cs.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: "replica-a"},
	}
	var renewed atomic.Int32
	leCtx, leCancel := context.WithCancel(ctx)
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: lock, LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 200 * time.Millisecond,
		ReleaseOnCancel: true,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(c context.Context) {
				// Stay leader until one renewal (an update) went through.
				for renewed.Load() == 0 {
					l, err := s.Client.CoordinationV1().Leases("kube-system").Get(c, "ipkeeper-controller", metav1.GetOptions{})
					if err == nil && l.Spec.RenewTime != nil && l.Spec.AcquireTime != nil && l.Spec.RenewTime.After(l.Spec.AcquireTime.Time) {
						renewed.Add(1)
					}
					select {
					case <-c.Done():
						return
					case <-time.After(100 * time.Millisecond):
					}
				}
				leCancel()
			},
			OnStoppedLeading: func() {},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	le.Run(leCtx)
	if ctx.Err() != nil || renewed.Load() == 0 {
		t.Fatalf("leader election as ipkeeper-controller did not acquire and renew the lease (ctx %v)", ctx.Err())
	}
	l, err := s.Client.CoordinationV1().Leases("kube-system").Get(ctx, "ipkeeper-controller", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the Lease after leader election: %v", err)
	}
	if l.Spec.HolderIdentity == nil || (*l.Spec.HolderIdentity != "replica-a" && *l.Spec.HolderIdentity != "") {
		t.Fatalf("lease holder %v, want replica-a (or released)", l.Spec.HolderIdentity)
	}

	if _, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("LIST pods in all namespaces as ipkeeper-controller: %v", err)
	}
	if _, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("LIST nodes as ipkeeper-controller: %v", err)
	}
	w, err := cs.CoreV1().Pods("").Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Errorf("WATCH pods as ipkeeper-controller: %v", err)
	} else {
		w.Stop()
	}
	refused := map[string]error{}
	_, refused["get pod"] = cs.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	refused["delete pod"] = cs.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{})
	refused["delete node"] = cs.CoreV1().Nodes().Delete(ctx, pod.Spec.NodeName, metav1.DeleteOptions{})
	other := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "kube-scheduler", Namespace: "kube-system"}}
	if _, err := s.Client.CoordinationV1().Leases("kube-system").Create(ctx, other, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	_, refused["get another lease"] = cs.CoordinationV1().Leases("kube-system").Get(ctx, "kube-scheduler", metav1.GetOptions{})
	_, refused["update another lease"] = cs.CoordinationV1().Leases("kube-system").Update(ctx, other, metav1.UpdateOptions{})
	_, refused["create a lease elsewhere"] = cs.CoordinationV1().Leases("default").Create(ctx,
		&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "ipkeeper-controller", Namespace: "default"}}, metav1.CreateOptions{})
	_, refused["get secret"] = cs.CoreV1().Secrets("kube-system").Get(ctx, "anything", metav1.GetOptions{})
	_, refused["create event"] = cs.CoreV1().Events(pod.Namespace).Create(ctx, &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: "web-0.ipkeeper", Namespace: pod.Namespace},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID},
	}, metav1.CreateOptions{})
	for what, err := range refused {
		if !apierrors.IsForbidden(err) {
			t.Errorf("%s as ipkeeper-controller: err = %v, want Forbidden", what, err)
		}
	}
}

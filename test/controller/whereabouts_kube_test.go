package controller

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipkeeper/ipkeeper/internal/config"
	"github.com/ipkeeper/ipkeeper/internal/datastore"
	"github.com/ipkeeper/ipkeeper/internal/importer"
	"github.com/ipkeeper/ipkeeper/internal/importer/whereabouts"
	"github.com/ipkeeper/ipkeeper/test/e2e/cnirun"
)

// The production IPPool (internal/importer/testdata): offsets 4 to 8 of 172.18.178.192/27 held; the pods
// behind 7 and 8 died with their node.
var (
	incidentNamespace = "nstest"
	incidentLive      = map[string]netip.Addr{
		"test-7d9f8c6b5-2xk4p": netip.MustParseAddr("172.18.178.196"),
		"test-7d9f8c6b5-9qwzm": netip.MustParseAddr("172.18.178.197"),
		"test-7d9f8c6b5-lm2vn": netip.MustParseAddr("172.18.178.198"),
	}
	incidentLeaked = map[string]netip.Addr{
		"test-7d9f8c6b5-stale1": netip.MustParseAddr("172.18.178.199"),
		"test-7d9f8c6b5-stale2": netip.MustParseAddr("172.18.178.200"),
	}
)

// TestWhereaboutsIncidentKubernetes replays the production incident on the
// kubernetes datastore: the whereabouts IPPool and its
// NetworkAttachmentDefinition are imported (importer.ApplyStore, as an
// admin) into a partition of the API server's CRDs; the pods behind three
// of its five allocations run, the two others are gone. The NAD's config
// with ipkeeper as the IPAM type (the plugin as the node's ServiceAccount)
// finds the pool exhausted: ADD fails with 100. ipkeeper-controller, as
// its shipped ServiceAccount on that partition (--leak-grace 2s),
// releases exactly the two leaked addresses, each logged with its pod,
// address and reason, and never a live pod's; the kubelet's retried ADD
// then gets one of them, and `ipkeeperctl check` finds nothing leaked.
func TestWhereaboutsIncidentKubernetes(t *testing.T) {
	s := setup(t)
	c := newCluster(t, s)
	nodeA := c.node("a")
	ctx := ctxT(t)

	// The pods that live on, in the NAD's namespace, with their addresses.
	if _, err := s.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: incidentNamespace}},
		metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	for name, addr := range incidentLive {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: incidentNamespace},
			Spec: corev1.PodSpec{NodeName: nodeA, Containers: []corev1.Container{{Name: "c", Image: "pause"}}}}
		p, err := s.Client.CoreV1().Pods(incidentNamespace).Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			zero := int64(0)
			_ = s.Client.CoreV1().Pods(incidentNamespace).Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
		})
		p.Status.Phase, p.Status.PodIP, p.Status.PodIPs = corev1.PodRunning, addr.String(), []corev1.PodIP{{IP: addr.String()}}
		if _, err := s.Client.CoreV1().Pods(incidentNamespace).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	// The import, as an admin would run it.
	root, err := cnirun.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	var files [][]byte
	for _, f := range []string{"whereabouts-ippools.yaml", "network-attachment-definition.yaml"} {
		b, err := os.ReadFile(filepath.Join(root, "internal", "importer", "testdata", f))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, b)
	}
	plan, err := whereabouts.Plan(files, whereabouts.Options{})
	if err != nil {
		t.Fatal(err)
	}
	admin, err := datastore.Open(ctx, config.Datastore{Type: config.DatastoreKubernetes, Kubeconfig: s.AdminKubeconfig, Prefix: c.ns}, datastore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if _, err := importer.ApplyStore(ctx, admin, plan, false); err != nil {
		t.Fatalf("import into the kubernetes datastore: %v", err)
	}

	net := nadNetworkOn(t, config.Datastore{Type: config.DatastoreKubernetes,
		Kubeconfig: s.NodeKubeconfig(t, nodeA), Prefix: c.ns})
	imported := net.handles()
	if len(imported) != 5 {
		t.Fatalf("imported handles: %+v, want 5", imported)
	}
	newUID := c.pod("new", nodeA)
	out := net.add(nodeA, c.ns, "new", newUID, "a-sandbox-new")
	if cerr, err := out.CNIError(); err != nil || cerr.Code != 100 {
		t.Fatalf("ADD in the exhausted imported pool: want error 100, got %v\n%v", err, out)
	}

	p := startController(t, "controller", net.env(), "--leader-elect=false", "--leak-grace=2s", "--resync=1s")
	p.waitMetric(time.Minute, `ipkeeper_releases_total{reason="pod-gone"}`, func(v float64) bool { return v == 2 })
	// Later passes release nothing more: the live pods' allocations stay.
	for range 3 {
		p.waitPasses(1)
		hs := net.handles()
		if len(hs) != len(incidentLive) {
			t.Fatalf("handles after the controller's passes: %+v, want the %d live pods'", hs, len(incidentLive))
		}
		for _, h := range hs {
			if want, ok := incidentLive[h.Pod]; !ok || h.Namespace != incidentNamespace || len(h.IPs) != 1 || h.IPs[0].Addr != want {
				t.Fatalf("handle %s of %s/%s holds %v, want a live pod's address", h.ID, h.Namespace, h.Pod, addrsOf(h))
			}
		}
	}
	for _, series := range []string{`ipkeeper_releases_total{reason="pod-gone"}`, `ipkeeper_releases_total{reason="node-gone"}`,
		`ipkeeper_release_skips_total{why="error"}`, `ipkeeper_reconcile_errors_total`} {
		want := 0.0
		if strings.Contains(series, "pod-gone") {
			want = 2
		}
		if n := p.metric(series); n != want {
			t.Errorf("%s = %v, want %v", series, n, want)
		}
	}
	for pod, addr := range incidentLeaked {
		if n := p.logCount("released leaked address", `"pod":"`+incidentNamespace+"/"+pod+`"`, `"address":"`+addr.String()+`"`, `"reason":"pod-gone"`); n != 1 {
			t.Errorf("%d release log lines for %s (%s), want 1", n, pod, addr)
		}
	}

	// The kubelet retries the ADD.
	out = net.add(nodeA, c.ns, "new", newUID, "a-sandbox-new")
	if out.ExitCode != 0 {
		t.Fatalf("ADD after the controller's releases:\n%v", out)
	}
	got := resultAddr(t, out.Stdout)
	if !slices.Contains([]netip.Addr{incidentLeaked["test-7d9f8c6b5-stale1"], incidentLeaked["test-7d9f8c6b5-stale2"]}, got) {
		t.Fatalf("the new pod got %v, not one of the released addresses", got)
	}
	if stdout, stderr, code := net.ctl("check", "--kubeconfig", s.AdminKubeconfig); code != 0 || !strings.Contains(stdout, "no leaked addresses") {
		t.Fatalf("ipkeeperctl check --kubeconfig: exit %d\n%s%s", code, stdout, stderr)
	}
}

package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/config"
	"github.com/ipkeeper/ipkeeper/internal/datastore"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/kubetest"
	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/store/etcd/etcdtest"
)

var srv *kubetest.Server

func TestMain(m *testing.M) {
	s, err := kubetest.StartMain()
	if err != nil && !errors.Is(err, kubetest.ErrNoAPIServer) {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	srv = s
	code := m.Run()
	s.Stop()
	os.Exit(code)
}

// clock is a settable clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

var t0 = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)

// backends are the datastores every rig test runs on.
var backends = []string{config.DatastoreLocal, config.DatastoreEtcd, config.DatastoreKubernetes}

// rig is one test's controller against the shared API server: the
// controller authenticates as the shipped ServiceAccount, uses a typed
// datastore of the test's own (a local store in a temp dir, a prefix of an
// embedded etcd, or a partition of the API server's CRDs opened with the
// controller's ServiceAccount) and a settable clock; its passes are run by
// the test.
type rig struct {
	t     *testing.T
	admin kubernetes.Interface
	ns    string // the test's namespace, also the prefix of its nodes
	dir   string
	ds    config.Datastore // the controller's datastore
	setup config.Datastore // the test's own opening of it
	keep  store.Store      // the test's store, kept open (etcd, kubernetes)
	clock *clock
	c     *Controller
	m     *Metrics
	grace time.Duration
}

// newRig is a rig on a local store.
func newRig(t *testing.T, grace time.Duration) *rig {
	t.Helper()
	return newRigOn(t, grace, config.DatastoreLocal)
}

// newRigOn is a rig on a datastore of type backend.
func newRigOn(t *testing.T, grace time.Duration, backend string) *rig {
	t.Helper()
	s := kubetest.Require(t, srv)
	r := &rig{t: t, admin: s.Client, dir: t.TempDir(), clock: &clock{t: t0}, grace: grace,
		ns: strings.ToLower(fmt.Sprintf("t%d", time.Now().UnixNano()%1e9))}
	ctx := context.Background()
	if _, err := r.admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: r.ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	controllerKubeconfig := s.ServiceAccountKubeconfig(t, "kube-system", "ipkeeper-controller")
	switch backend {
	case config.DatastoreLocal:
		r.ds = config.Datastore{Type: config.DatastoreLocal, Path: r.dir}
		r.setup = r.ds
	case config.DatastoreEtcd:
		e := etcdtest.ForTest(t, nil)
		r.ds = config.Datastore{Type: config.DatastoreEtcd, Endpoints: []string{e.Endpoint}, Prefix: "/" + r.ns}
		r.setup = r.ds
	case config.DatastoreKubernetes:
		// The controller's ServiceAccount for the controller and for the
		// allocations of the test, which play many nodes from one process
		// (a node's own credentials may write only its node's objects).
		r.ds = config.Datastore{Type: config.DatastoreKubernetes, Kubeconfig: controllerKubeconfig, Prefix: r.ns}
		r.setup = config.Datastore{Type: config.DatastoreKubernetes, Kubeconfig: controllerKubeconfig, Prefix: r.ns}
	default:
		t.Fatalf("unknown backend %q", backend)
	}
	if backend != config.DatastoreLocal {
		st, err := datastore.Open(ctx, r.setup, datastore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		r.keep = st
		t.Cleanup(func() { _ = st.Close() })
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", controllerKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	r.m = NewMetrics()
	cfg.Wrap(r.m.CountRequests)
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r.c, err = New(Config{
		Client:    client,
		Open:      func(ctx context.Context) (store.Store, error) { return datastore.Open(ctx, r.ds, datastore.Options{}) },
		KeepOpen:  backend != config.DatastoreLocal,
		LeakGrace: grace,
		Resync:    time.Hour,
		Log:       slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo})),
		Metrics:   r.m,
		Now:       r.clock.Now,
	})
	if err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if !r.c.Sync(sctx) {
		t.Fatal("informers did not sync")
	}
	t.Cleanup(r.c.Shutdown)
	return r
}

// alloc runs f with an allocator over the test's store (a local store is
// closed after, so the controller can open it).
func (r *rig) alloc(f func(a *allocator.Allocator)) {
	r.t.Helper()
	if r.keep != nil {
		f(allocator.New(r.keep, nil))
		return
	}
	st, err := datastore.Open(context.Background(), r.setup, datastore.Options{})
	if err != nil {
		r.t.Fatal(err)
	}
	defer st.Close()
	f(allocator.New(st, nil))
}

// attach allocates one address from pool for a container of pod (uid may
// be "", pod "" for an attachment without a pod) on node, created at the
// given time.
func (r *rig) attach(pool ipam.Pool, container, pod, uid, node string, created time.Time) ipam.Handle {
	r.t.Helper()
	var h ipam.Handle
	r.alloc(func(a *allocator.Allocator) {
		a.Now = func() time.Time { return created }
		ns := ""
		if pod != "" {
			ns = r.ns
		}
		var err error
		h, err = a.Allocate(context.Background(), allocator.Request{
			Handle: ipam.Handle{ID: ipam.HandleID("net", container, "eth0"), Network: "net", ContainerID: container, IfName: "eth0",
				Node: node, Namespace: ns, Pod: pod, PodUID: uid},
			Sets: [][]string{{pool.Name}},
		})
		if err != nil {
			r.t.Fatalf("allocate %s: %v", container, err)
		}
	})
	return h
}

// handles returns the stored handles by container ID.
func (r *rig) handles() map[string]ipam.Handle {
	r.t.Helper()
	out := map[string]ipam.Handle{}
	r.alloc(func(a *allocator.Allocator) {
		hs, err := a.Handles(context.Background())
		if err != nil {
			r.t.Fatal(err)
		}
		for _, h := range hs {
			out[h.ContainerID] = h
		}
	})
	return out
}

// storeState returns every object of the store (pools, claims, node
// objects) with its version.
func (r *rig) storeState() map[string]store.Version {
	r.t.Helper()
	out := map[string]store.Version{}
	r.alloc(func(a *allocator.Allocator) {
		ctx := context.Background()
		ps, err := a.Store().ListPools(ctx)
		if err != nil {
			r.t.Fatal(err)
		}
		for _, p := range ps {
			out["pool "+p.Spec.Name] = p.Version
		}
		cs, err := a.Store().ListClaims(ctx, store.ClaimSelector{})
		if err != nil {
			r.t.Fatal(err)
		}
		for _, c := range cs {
			out["claim "+c.Pool+" "+c.CIDR.String()] = c.Version
		}
		ns, err := a.Store().ListNodes(ctx, store.NodeSelector{})
		if err != nil {
			r.t.Fatal(err)
		}
		for _, n := range ns {
			out["node "+n.Name] = n.Version
		}
	})
	return out
}

// pass runs one pass at time at.
func (r *rig) pass(at time.Time) {
	r.t.Helper()
	r.clock.Set(at)
	if _, err := r.c.Pass(context.Background()); err != nil {
		r.t.Fatalf("pass at %v: %v", at.Sub(t0), err)
	}
}

func (r *rig) node(name string) string {
	r.t.Helper()
	full := r.ns + "-" + name
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: full}}
	if _, err := r.admin.CoreV1().Nodes().Create(context.Background(), n, metav1.CreateOptions{}); err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { _ = r.admin.CoreV1().Nodes().Delete(context.Background(), full, metav1.DeleteOptions{}) })
	r.waitCache(func() bool { return r.c.view.snapshot().NodeExists(full) }, "node "+full+" in the cache")
	return full
}

func (r *rig) deleteNode(name string) {
	r.t.Helper()
	if err := r.admin.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		r.t.Fatal(err)
	}
	r.waitCache(func() bool { return !r.c.view.snapshot().NodeExists(name) }, "node "+name+" gone from the cache")
}

// pod creates a pod bound to node with a phase and addresses, and waits
// until the controller's cache has it; it returns its UID.
func (r *rig) pod(name, node string, phase corev1.PodPhase, ips ...netip.Addr) string {
	r.t.Helper()
	ctx := context.Background()
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: r.ns},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "pause"}}}}
	p, err := r.admin.CoreV1().Pods(r.ns).Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		r.t.Fatal(err)
	}
	r.setStatus(p, phase, ips...)
	uid := string(p.UID)
	r.waitCache(func() bool {
		got, ok := r.c.view.snapshot().Pod(r.ns, name)
		return ok && got.UID == uid && got.Phase == string(phase) && len(got.IPs) == len(ips)
	}, "pod "+name+" in the cache")
	return uid
}

func (r *rig) setStatus(p *corev1.Pod, phase corev1.PodPhase, ips ...netip.Addr) {
	r.t.Helper()
	p.Status.Phase = phase
	p.Status.PodIPs = nil
	for _, ip := range ips {
		p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: ip.String()})
	}
	if len(ips) > 0 {
		p.Status.PodIP = ips[0].String()
	}
	if _, err := r.admin.CoreV1().Pods(r.ns).UpdateStatus(context.Background(), p, metav1.UpdateOptions{}); err != nil {
		r.t.Fatal(err)
	}
}

// deletePod deletes a pod at once (grace period 0: it died with its node)
// and waits until the cache no longer has that UID.
func (r *rig) deletePod(name string) {
	r.t.Helper()
	zero := int64(0)
	err := r.admin.CoreV1().Pods(r.ns).Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	if err != nil && !apierrors.IsNotFound(err) {
		r.t.Fatal(err)
	}
	r.waitCache(func() bool { _, ok := r.c.view.snapshot().Pod(r.ns, name); return !ok }, "pod "+name+" gone from the cache")
}

// waitCache waits (bounded) until the informers' caches show cond.
func (r *rig) waitCache(cond func() bool, what string) {
	r.t.Helper()
	for range 3000 {
		if cond() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	r.t.Fatalf("timed out waiting for %s", what)
}

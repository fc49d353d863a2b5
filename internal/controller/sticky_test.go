package controller

import (
	"context"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
)

// TestStickyLifecycle runs the controller's passes against the real API
// server (a StatefulSet object whose replicas the test sets; no
// controller-manager runs) and every store type, IPv4 and IPv6: a sticky
// allocation whose pod is gone is parked, not released; a parked
// reservation is kept while its StatefulSet wants its ordinal, freed when
// the set is scaled below it, when the set is deleted, and after the TTL,
// each on the second observation a grace period after the first; one
// re-homed to a new pod between the observations is left alone.
func TestStickyLifecycle(t *testing.T) {
	for _, backend := range backends {
		for _, f := range passFamilies {
			t.Run(backend+"/"+f.name, func(t *testing.T) { testStickyLifecycle(t, backend, f) })
		}
	}
}

func testStickyLifecycle(t *testing.T, backend string, f family) {
	const grace, ttl = time.Minute, 10 * time.Hour
	r := newRigOn(t, grace, backend)
	r.c.cfg.StickyTTL = ttl
	ctx := context.Background()
	r.alloc(func(a *allocator.Allocator) {
		if _, err := a.EnsurePool(ctx, f.pool); err != nil {
			t.Fatal(err)
		}
	})
	node := r.node("a")
	sts := r.statefulSet("pg", 3)

	// attach allocates for pod's sticky identity at time at.
	attach := func(container, pod string, at time.Time) ipam.Handle {
		t.Helper()
		var h ipam.Handle
		r.alloc(func(a *allocator.Allocator) {
			a.Now = func() time.Time { return at }
			var err error
			h, err = a.AllocateSticky(ctx, allocator.Request{
				Handle: ipam.Handle{ID: ipam.HandleID("net", container, "eth0"), Network: "net", ContainerID: container, IfName: "eth0",
					Node: node, Namespace: r.ns, Pod: pod, PodUID: "uid-" + container,
					Sticky: ipam.StickyID{Kind: ipam.StickyPod, Namespace: r.ns, Name: pod}.String()},
				Sets: [][]string{{f.pool.Name}},
			})
			if err != nil {
				t.Fatalf("allocate %s: %v", container, err)
			}
		})
		return h
	}
	del := func(h ipam.Handle, at time.Time) {
		t.Helper()
		r.alloc(func(a *allocator.Allocator) {
			a.Now = func() time.Time { return at }
			if _, parked, err := a.ReleaseOrPark(ctx, node, h.ID); err != nil || !parked {
				t.Fatalf("DEL %s: parked=%v %v", h.ID, parked, err)
			}
		})
	}
	state := func(container string) (held, parked bool) {
		h, ok := r.handles()[container]
		return ok, ok && h.IsParked()
	}
	want := func(container string, held, parked bool, when string) {
		t.Helper()
		if h, p := state(container); h != held || p != parked {
			t.Fatalf("%s: %s held=%v parked=%v, want %v %v", when, container, h, p, held, parked)
		}
	}

	// pg-0: its pod's DEL never came (no pod in the API): parked on the
	// second observation, never released.
	attach("c0", "pg-0", t0)
	r.pass(t0)
	want("c0", true, false, "first observation")
	r.pass(t0.Add(grace))
	want("c0", true, true, "second observation")
	r.pass(t0.Add(3 * grace))
	want("c0", true, true, "the StatefulSet wants ordinal 0")

	// pg-2: parked by its DEL; freed once the set is scaled to 2.
	c2 := attach("c2", "pg-2", t0)
	del(c2, t0)
	at := t0.Add(4 * grace)
	r.pass(at)
	want("c2", true, true, "replicas 3")
	r.scale(sts, 2)
	r.pass(at.Add(grace / 2))
	want("c2", true, true, "scaled to 2, first observation")
	r.pass(at.Add(grace/2 + grace))
	want("c2", false, false, "scaled to 2, second observation")

	// pg-1: re-homed to a new pod between the controller's observations
	// of its ended identity: the new pod keeps it.
	c1 := attach("c1", "pg-1", t0)
	del(c1, t0)
	at = at.Add(3 * grace)
	r.scale(sts, 1)
	r.pass(at)
	want("c1", true, true, "scaled to 1, first observation")
	n1 := attach("n1", "pg-1", at)
	if n1.IPs[0].Addr != c1.IPs[0].Addr {
		t.Fatalf("re-homed %v, want %s", n1.IPs, c1.IPs[0].Addr)
	}
	r.pass(at.Add(grace))
	want("n1", true, false, "re-homed between the observations")

	// pg-0's reservation ends with its TTL (from its parking, at t0+grace).
	r.pass(t0.Add(grace + ttl))
	want("c0", true, true, "TTL passed, first observation")
	r.pass(t0.Add(2*grace + ttl))
	want("c0", false, false, "TTL passed, second observation")

	// The set deleted: a parked pg-0 goes.
	z := attach("z", "pg-0", t0.Add(ttl))
	del(z, t0.Add(ttl))
	at = t0.Add(ttl + 3*grace)
	if err := r.admin.AppsV1().StatefulSets(r.ns).Delete(ctx, "pg", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	r.pass(at)
	want("z", true, true, "set deleted, first observation")
	r.pass(at.Add(grace))
	want("z", false, false, "set deleted, second observation")
}

// statefulSet creates a StatefulSet with replicas; no controller
// makes its pods.
func (r *rig) statefulSet(name string, replicas int32) *appsv1.StatefulSet {
	r.t.Helper()
	labels := map[string]string{"app": name}
	s := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: r.ns},
		Spec: appsv1.StatefulSetSpec{Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "pause"}}}}}}
	s, err := r.admin.AppsV1().StatefulSets(r.ns).Create(context.Background(), s, metav1.CreateOptions{})
	if err != nil {
		r.t.Fatal(err)
	}
	return s
}

func (r *rig) scale(s *appsv1.StatefulSet, replicas int32) {
	r.t.Helper()
	cur, err := r.admin.AppsV1().StatefulSets(r.ns).Get(context.Background(), s.Name, metav1.GetOptions{})
	if err != nil {
		r.t.Fatal(err)
	}
	cur.Spec.Replicas = &replicas
	if _, err := r.admin.AppsV1().StatefulSets(r.ns).Update(context.Background(), cur, metav1.UpdateOptions{}); err != nil {
		r.t.Fatal(err)
	}
}

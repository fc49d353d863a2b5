package leaks

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestTracker(t *testing.T) {
	tr := &Tracker{Grace: time.Minute}
	conf, next := tr.Observe(t0, []string{"a", "b"})
	if len(conf) != 0 || !next.Equal(t0.Add(time.Minute)) {
		t.Fatalf("first observation: confirmed %v next %v", conf, next)
	}
	// Just before the grace period: nothing yet.
	if conf, _ = tr.Observe(t0.Add(time.Minute-time.Nanosecond), []string{"a", "b"}); len(conf) != 0 {
		t.Fatalf("confirmed %v before the grace period", conf)
	}
	// b disappears for one observation: it starts over.
	tr.Observe(t0.Add(30*time.Second), []string{"a", "c"})
	conf, next = tr.Observe(t0.Add(time.Minute), []string{"a", "b", "c"})
	if !slices.Equal(conf, []string{"a"}) {
		t.Fatalf("confirmed %v, want [a]", conf)
	}
	if want := t0.Add(90 * time.Second); !next.Equal(want) {
		t.Errorf("next %v, want %v (c, first seen at 30s)", next, want)
	}
	if f, ok := tr.FirstSeen("b"); !ok || !f.Equal(t0.Add(time.Minute)) {
		t.Errorf("b first seen %v %v", f, ok)
	}
	if tr.Pending() != 3 {
		t.Errorf("pending %d", tr.Pending())
	}
	conf, next = tr.Observe(t0.Add(3*time.Minute), nil)
	if len(conf) != 0 || !next.IsZero() || tr.Pending() != 0 {
		t.Errorf("empty observation: %v %v %d", conf, next, tr.Pending())
	}
}

func TestTrackerZeroGrace(t *testing.T) {
	tr := &Tracker{}
	if conf, _ := tr.Observe(t0, []string{"a"}); !slices.Equal(conf, []string{"a"}) {
		t.Errorf("grace 0: confirmed %v", conf)
	}
}

func TestKey(t *testing.T) {
	for _, f := range families {
		h := handle("c1", "ns", "web", "u1", t0, f.a1)
		same := handle("c1", "ns", "web", "u1", t0, f.a1)
		if Key(h) != Key(same) {
			t.Errorf("%s: equal handles, different keys", f.name)
		}
		for name, other := range map[string]func() (string, string){
			"created":   func() (string, string) { o := h; o.Created = t0.Add(time.Nanosecond); return Key(h), Key(o) },
			"container": func() (string, string) { o := h; o.ContainerID = "c2"; return Key(h), Key(o) },
			"uid":       func() (string, string) { o := handle("c1", "ns", "web", "u2", t0, f.a1); return Key(h), Key(o) },
			"address":   func() (string, string) { o := handle("c1", "ns", "web", "u1", t0, f.a2); return Key(h), Key(o) },
			"id":        func() (string, string) { o := h; o.ID = "x"; return Key(h), Key(o) },
		} {
			if a, b := other(); a == b {
				t.Errorf("%s: another %s, same key", f.name, name)
			}
		}
	}
}

func TestPodFromAPI(t *testing.T) {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", UID: "u1"},
		Spec: corev1.PodSpec{NodeName: "node-a"},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.1.0.5",
			PodIPs: []corev1.PodIP{{IP: "10.1.0.5"}, {IP: "fd00::5"}, {IP: "bogus"}}}}
	got := PodFromAPI(p)
	want := Pod{Namespace: "ns", Name: "web", UID: "u1", Node: "node-a", Phase: "Running",
		IPs: []netip.Addr{netip.MustParseAddr("10.1.0.5"), netip.MustParseAddr("fd00::5")}}
	if got.Namespace != want.Namespace || got.Name != want.Name || got.UID != want.UID || got.Node != want.Node ||
		got.Phase != want.Phase || !slices.Equal(got.IPs, want.IPs) {
		t.Errorf("PodFromAPI = %+v, want %+v", got, want)
	}
	p.Status.PodIPs = nil
	if got := PodFromAPI(p); !slices.Equal(got.IPs, want.IPs[:1]) {
		t.Errorf("podIP only: %v", got.IPs)
	}
	p.Status.Phase = corev1.PodSucceeded
	if !PodFromAPI(p).Finished() {
		t.Error("Succeeded is not finished")
	}
}

package webui

import (
	"strings"
	"testing"
)

// TestSearchCutsAtMaxResults searches three nodes of 110 pods: "pod-1"
// names 21 pods a node (pod-1, pod-10..19, pod-100..109), more than
// maxResults in all, so the answer holds maxResults results, the exact
// matches first, and tells that there were more; "pod-17" names one a
// node, all shown.
func TestSearchCutsAtMaxResults(t *testing.T) {
	m := scaleModel(t, 3, 110)
	m.mu.RLock()
	defer m.mu.RUnlock()
	v := m.search("pod-1")
	if len(v.Results) != maxResults || !v.More {
		t.Fatalf("search pod-1: %d results, more %v; want %d, more true", len(v.Results), v.More, maxResults)
	}
	for _, r := range v.Results[:3] {
		if !strings.HasPrefix(r.Label, "default/pod-1 — ") {
			t.Fatalf("search pod-1: the exact matches are not first: %q", r.Label)
		}
	}
	if v := m.search("pod-17"); len(v.Results) != 3 || v.More {
		t.Fatalf("search pod-17: %d results, more %v; want 3, more false", len(v.Results), v.More)
	}
}

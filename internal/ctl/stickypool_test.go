package ctl

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
)

// TestPoolSticky: 'pool add --sticky' stores a sticky pool, 'pool set
// --sticky=false' clears the flag and '--sticky' sets it again, each
// shown by 'pool list'; 'pool set' without a flag, or of an absent pool,
// fails and changes nothing.
func TestPoolSticky(t *testing.T) {
	h := newHarness(t)
	h.ok("pool", "add", "db4", "--cidr", "10.7.0.0/24", "--sticky")
	h.ok("pool", "add", "web4", "--cidr", "10.8.0.0/24")
	sticky := func() map[string]bool {
		var l poolList
		if err := json.Unmarshal([]byte(h.ok("pool", "list", "-o", "json")), &l); err != nil {
			t.Fatal(err)
		}
		out := map[string]bool{}
		for _, p := range l.Pools {
			out[p.Name] = p.Sticky
		}
		return out
	}
	if got := sticky(); !got["db4"] || got["web4"] {
		t.Fatalf("after pool add: sticky %v, want db4 only", got)
	}
	if out := h.ok("pool", "list"); !strings.Contains(out, "sticky") {
		t.Errorf("pool list does not flag the sticky pool:\n%s", out)
	}
	h.ok("pool", "set", "db4", "--sticky=false")
	h.ok("pool", "set", "web4", "--sticky")
	if got := sticky(); got["db4"] || !got["web4"] {
		t.Fatalf("after pool set: sticky %v, want web4 only", got)
	}
	h.fails(ExitError, []string{"--sticky"}, "pool", "set", "web4")
	h.fails(ExitError, []string{"nope"}, "pool", "set", "nope", "--sticky")
	h.store(func(a *allocator.Allocator) {
		pools, err := a.Pools(context.Background())
		if err != nil || len(pools) != 2 {
			t.Fatalf("pools after the refused sets: %+v %v", pools, err)
		}
		for _, p := range pools {
			if p.Sticky != (p.Name == "web4") {
				t.Errorf("pool %s: Sticky %v after the refused sets", p.Name, p.Sticky)
			}
		}
	})
}

package plugin

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/podinfo"
)

// TestAgentContext: the agent gets at most half of what is left of the
// call, and never more than agentCallMax.
func TestAgentContext(t *testing.T) {
	for _, left := range []time.Duration{time.Second, 9 * time.Second, 58 * time.Second, 10 * time.Minute} {
		ctx, cancel := context.WithTimeout(context.Background(), left)
		actx, acancel := agentContext(ctx)
		d, _ := actx.Deadline()
		got := time.Until(d)
		acancel()
		cancel()
		if got > left/2 || got > agentCallMax {
			t.Errorf("%v left: the agent gets %v, want at most %v and %v", left, got, left/2, agentCallMax)
		}
	}
}

// TestHandover: what a hand-off passes reaches the sibling as it was
// meant (replacing what the environment held), and a deadline that is no
// number is refused with a CNI error naming the variable.
func TestHandover(t *testing.T) {
	end := time.Now().Add(7 * time.Second).Truncate(time.Nanosecond)
	agentErr := fmt.Errorf("%w: /run/agent.sock: reading the answer:\ni/o timeout", podinfo.ErrAgentUnreachable)
	env := handover{end: end, agentErr: agentErr}.environ([]string{"A=1", deadlineEnv + "=5", agentDownEnv + "=old", "B=2"})
	vars := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		if _, dup := vars[k]; dup {
			t.Fatalf("%s twice in %q", k, env)
		}
		vars[k] = v
	}
	if vars["A"] != "1" || vars["B"] != "2" || len(vars) != 4 {
		t.Fatalf("environment %q", env)
	}
	h, err := handedOver(func(k string) string { return vars[k] })
	if err != nil || !h.end.Equal(end) || !errors.Is(h.agentErr, podinfo.ErrAgentUnreachable) ||
		!strings.Contains(h.agentErr.Error(), "reading the answer: i/o timeout") {
		t.Fatalf("handed over %v %v (%v), want %v and the agent's error on one line", h.end, h.agentErr, err, end)
	}
	if h, err := handedOver(func(string) string { return "" }); err != nil || !h.end.IsZero() || h.agentErr != nil {
		t.Fatalf("nothing handed over: %+v %v", h, err)
	}
	for _, bad := range []string{"soon", "-5", "1.5e9"} {
		_, err := handedOver(func(k string) string {
			if k == deadlineEnv {
				return bad
			}
			return ""
		})
		if e := cniError(err); err == nil || e.Code != 4 || !strings.Contains(e.Msg, deadlineEnv) {
			t.Errorf("%s=%q: %v, want code 4 naming it", deadlineEnv, bad, err)
		}
	}
}

// TestServeContextEnds: a verb served for a caller that is gone (its
// context ended: the agent's request of a plugin that gave up waiting)
// stops with "try again later" and allocates nothing.
func TestServeContextEnds(t *testing.T) {
	h := newHarness(t)
	conf := h.conf("1.1.0", v4Ranges)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if out, e := h.p.ServeContext(ctx, "ADD", h.args("gone", conf), nil); e == nil || e.Code != 11 {
		t.Fatalf("ADD for a caller that left: %s %v, want error 11", out, e)
	}
	if res, err := h.add("next", conf); err != nil || len(res.IPs) != 1 || addrs(res)[0] != netip.MustParseAddr("10.20.0.2") {
		t.Fatalf("ADD after it: %v %v, want the pool's first address 10.20.0.2 (nothing held)", res, err)
	}
}

package e2e

import (
	"net/netip"
	"testing"
)

// TestHarnessHostLocal runs the harness (host namespace, bridge wrapper,
// libcni, ping, DEL) with upstream host-local as the IPAM plugin. It is the
// control for every bridge test: when it fails, the machine or the harness
// is at fault, not ipkeeper.
func TestHarnessHostLocal(t *testing.T) {
	needRoot(t)
	h := newHost(t, tool("host-local"))
	r := newRuntime(t, h, bridgeConf("ipk-e2e-control", "1.1.0", true, map[string]any{
		"type":    "host-local",
		"dataDir": t.TempDir(),
		"ranges":  [][]map[string]any{{{"subnet": "10.97.0.0/24"}}},
	}))
	seen := map[netip.Addr]string{}
	var cs []*container
	for i := range 3 {
		c := r.mustAdd(t, idf("control-%d", i))
		a := c.addr4(t)
		if prev, dup := seen[a]; dup {
			t.Fatalf("%s and %s both got %v", prev, c.id, a)
		}
		seen[a] = c.id
		t.Logf("%s: %v gw %v", c.id, a, c.gateway(t, 4))
		ping(t, c.ns, c.gateway(t, 4).String())
		cs = append(cs, c)
	}
	ping(t, cs[0].ns, cs[1].addr4(t).String())
	for _, c := range cs {
		if err := r.del(t, c); err != nil {
			t.Fatalf("DEL %s: %v", c.id, err)
		}
	}
}

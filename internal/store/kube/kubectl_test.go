package kube

import (
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"os/exec"
	"strings"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/kubetest"
	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/testenv"
)

// TestKubectlGetColumns: `kubectl get` shows the printer columns with the
// values the backend stored (pool: CIDR, block size, disabled, deleting;
// block: CIDR, pool, node, addresses in use; node: its name).
func TestKubectlGetColumns(t *testing.T) {
	testenv.NeedCommands(t, "kubectl")
	s := kubetest.Require(t, srv)
	st := openStore(t)
	ctx := ctxT(t)
	if _, err := st.CreatePool(ctx, store.Pool{Spec: pool6}); err != nil {
		t.Fatal(err)
	}
	n := dualStackNode(t, "node-a", "node-b")
	n.Blocks = n.Blocks[1:] // the IPv6 block, with a record of each handle
	n.Handles[0].IPs = n.Handles[0].IPs[1:]
	n.Handles = []ipam.Handle{n.Handles[0], n.Handles[2]}
	if _, err := st.CreateNode(ctx, claimed(t, st, n)); err != nil {
		t.Fatal(err)
	}
	get := func(resource string) string {
		t.Helper()
		out, err := exec.Command("kubectl", "--kubeconfig", s.AdminKubeconfig, "get", resource, "-l", LabelPartition+"="+st.Prefix()).CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl get %s: %v\n%s", resource, err, out)
		}
		return string(out)
	}
	for _, c := range []struct {
		resource string
		header   []string
		row      []string
	}{
		{ResourcePools, []string{"NAME", "CIDR", "BLOCK SIZE", "DISABLED", "DELETING", "AGE"},
			[]string{st.names.object(pool6.Name), "fd00:22::/64", "122", "true", "true"}},
		{ResourceBlocks, []string{"NAME", "CIDR", "POOL", "NODE", "IN USE", "AGE"},
			[]string{st.Prefix() + ".fd00---64--" + hashOf(pool6.Name) + ".fd00-22--40-122", "fd00:22::40/122", "fd00::-64", "node-a", "2"}},
		{ResourceNodes, []string{"NAME", "NODE", "AGE"},
			[]string{st.Prefix() + ".node-a", "node-a"}},
	} {
		out := get(c.resource)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != 2 {
			t.Fatalf("kubectl get %s:\n%s\nwant a header and one row", c.resource, out)
		}
		if got := strings.Join(strings.Fields(lines[0]), " "); got != strings.Join(c.header, " ") {
			t.Errorf("kubectl get %s header %q, want %q", c.resource, got, strings.Join(c.header, " "))
		}
		if got, want := strings.Fields(lines[1]), c.row; len(got) < len(want) || strings.Join(got[:len(want)], " ") != strings.Join(want, " ") {
			t.Errorf("kubectl get %s row %q, want it to start with %q", c.resource, lines[1], strings.Join(want, " "))
		}
	}
}

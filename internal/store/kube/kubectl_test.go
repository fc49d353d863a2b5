package kube

import (
	"net/netip"
	"os/exec"
	"strings"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/kubetest"
	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/testenv"
)

// TestKubectlGetColumns: `kubectl get` shows the printer columns with the
// values the backend stored (pool: CIDR, block size, disabled, deleting;
// block: CIDR, pool, node; node: counts of blocks, addresses and records). In Use and Free stay empty
// until the controller writes the status.
func TestKubectlGetColumns(t *testing.T) {
	testenv.NeedCommands(t, "kubectl")
	s := kubetest.Require(t, srv)
	st := openStore(t)
	ctx := ctxT(t)
	if _, err := st.CreatePool(ctx, store.Pool{Spec: pool6}); err != nil {
		t.Fatal(err)
	}
	c := store.Claim{BlockRef: store.BlockRef{Pool: pool6.Name, CIDR: netip.MustParsePrefix("fd00:22::40/122")}, Node: "node-a"}
	if _, err := st.CreateClaim(ctx, c); err != nil {
		t.Fatal(err)
	}
	if _, err := st.CreateNode(ctx, dualStackNode(t, "node-a", "node-b")); err != nil {
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
		{ResourcePools, []string{"NAME", "CIDR", "BLOCK SIZE", "DISABLED", "DELETING", "IN USE", "FREE", "AGE"},
			[]string{st.names.object(pool6.Name), "fd00:22::/64", "122", "true", "true"}},
		{ResourceBlocks, []string{"NAME", "CIDR", "POOL", "NODE", "IN USE", "AGE"},
			[]string{st.Prefix() + ".fd00---64--" + hashOf(pool6.Name) + ".fd00-22--40-122", "fd00:22::40/122", "fd00::-64", "node-a"}},
		{ResourceNodes, []string{"NAME", "NODE", "BLOCKS", "IN USE", "HANDLES", "AGE"},
			[]string{st.Prefix() + ".node-a", "node-a", "2", "4", "3"}},
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

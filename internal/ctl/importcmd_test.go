package ctl

import (
	"os"
	"testing"
)

// TestImportCalicoIfName: an empty, slashed or otherwise impossible
// --ifname is refused with an error naming the flag, before the store is
// opened (nothing is created), instead of creating handles no CNI DEL can
// match (an empty one silently meant "eth0").
func TestImportCalicoIfName(t *testing.T) {
	for _, bad := range []string{"", "eth0/1", "/", "a:b", "eth 0", "abcdefghijklmnop"} {
		h := newHarness(t)
		h.fails(ExitError, []string{"--ifname", "interface name"}, "import", "calico", "--file", calicoFile, "--ifname", bad)
		if es, err := os.ReadDir(h.dir); err != nil || len(es) != 0 {
			t.Fatalf("--ifname %q: the store directory holds %v (%v), want nothing", bad, es, err)
		}
	}
	h := newHarness(t)
	h.ok("import", "calico", "--file", calicoFile, "--ifname", "eth0.100")
}

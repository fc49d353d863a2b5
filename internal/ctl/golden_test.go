package ctl

import (
	"strings"
	"testing"
)

const (
	calicoFile      = "../importer/testdata/calico-block-100.112.209.128-26.json"
	whereaboutsFile = "../importer/testdata/whereabouts-ippools.yaml"
	nadFile         = "../importer/testdata/network-attachment-definition.yaml"
)

// TestGoldenTables pins the table output of every verb (go test -update
// rewrites testdata/*.golden).
func TestGoldenTables(t *testing.T) {
	h := newHarness(t)
	h.populate()
	for _, c := range []struct{ name, args string }{
		{"pool_list", "pool list"},
		{"show", "show"},
		{"show_blocks_nodes", "show --blocks --nodes"},
		{"block_show", "block show 10.9.0.0/28"},
		{"block_show_pool", "block show fd00:9::/120"},
		{"ip_show", "ip show 10.9.0.2"},
		{"ip_show_free", "ip show 10.9.0.9"},
		{"check_clean", "check"},
		{"gc_dry_run", "gc --dry-run"},
	} {
		t.Run(c.name, func(t *testing.T) {
			h.t = t
			h.golden(c.name, h.ok(strings.Fields(c.args)...))
		})
	}
	h.t = t
	h.golden("ip_release", h.ok("ip", "release", "10.9.0.3"))
	h.golden("gc", h.ok("gc"))
	h.golden("ip_release_forced", h.ok("ip", "release", "10.9.0.16", "--force"))
	h.golden("check_after", h.ok("check"))
}

func TestGoldenImports(t *testing.T) {
	h := newHarness(t)
	h.golden("import_calico_dry_run", h.ok("import", "calico", "--file", calicoFile, "--dry-run"))
	h.golden("import_calico", h.ok("import", "calico", "--file", calicoFile))
	h.golden("import_calico_again", h.ok("import", "calico", "--file", calicoFile))
	h.golden("import_whereabouts", h.ok("import", "whereabouts", "--file", whereaboutsFile, "--file", nadFile))
	h.golden("import_block_show", h.ok("block", "show", "100.112.209.128/26"))
	h.golden("import_show", h.ok("show", "--blocks", "--nodes"))
}

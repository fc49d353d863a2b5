package ctl

import (
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

func fields(s string) []string { return strings.Fields(s) }

func TestPoolAddRejects(t *testing.T) {
	h := newHarness(t)
	h.ok(fields("pool add taken4 --cidr 10.50.0.0/16")...)
	h.ok(fields("pool add taken6 --cidr fd50::/64")...)
	for _, c := range []struct {
		name, args string
		mention    []string
	}{
		{"no cidr", "pool add x", []string{"cidr"}},
		{"bad cidr/v4", "pool add x --cidr 10.0.0.0/33", []string{"10.0.0.0/33"}},
		{"bad cidr/v6", "pool add x --cidr fd00::/129", []string{"fd00::/129"}},
		{"host bits/v4", "pool add x --cidr 10.1.0.5/24", []string{"10.1.0.0/24"}},
		{"host bits/v6", "pool add x --cidr fd01::5/64", []string{"fd01::/64"}},
		{"smaller than block/v4", "pool add x --cidr 10.1.0.0/28 --block-size 26", []string{"smaller than its block size"}},
		{"smaller than block/v6", "pool add x --cidr fd01::/124 --block-size 122", []string{"smaller than its block size"}},
		{"overlap/v4", "pool add x --cidr 10.50.3.0/24", []string{"taken4", "--allow-overlap"}},
		{"overlap/v6", "pool add x --cidr fd50::/100", []string{"taken6"}},
		{"same name", "pool add taken4 --cidr 10.60.0.0/24", []string{"already exists"}},
		{"bad selector", "pool add x --cidr 10.61.0.0/24 --node-selector x,in,(a", []string{"node-selector"}},
		{"gateway outside", "pool add x --cidr 10.62.0.0/24 --gateway 10.63.0.1", []string{"gateway"}},
		{"bad output", "pool list -o xml", []string{"xml"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			h.t = t
			h.fails(ExitError, c.mention, fields(c.args)...)
		})
	}
	h.t = t
	if got := h.ok("pool", "list", "-o", "json"); strings.Count(got, `"name"`) != 2 {
		t.Fatalf("refused adds changed the pools:\n%s", got)
	}
	h.ok(fields("pool add small4 --cidr 10.70.0.0/28")...) // default block size clamps to the pool
	h.ok(fields("pool add other-net --cidr 10.50.0.0/24 --allow-overlap")...)
}

func TestPoolRmRefusedWhileInUse(t *testing.T) {
	h := newHarness(t)
	h.populate()
	h.fails(ExitError, []string{`pool "p4" has 3 addresses in use`}, "pool", "rm", "p4")
	h.fails(ExitError, []string{"pool not found"}, "pool", "rm", "nope")
	h.store(func(a *allocator.Allocator) {
		for _, hd := range [][2]string{{"node-a", "net.c1.eth0"}, {"node-a", "net.c2.eth0"}, {"node-b", "net.c3.eth0"}} {
			if _, err := a.Release(t.Context(), hd[0], hd[1]); err != nil {
				t.Fatal(err)
			}
		}
	})
	h.ok("pool", "rm", "p4")
	if out := h.ok("pool", "list"); strings.Contains(out, "p4") {
		t.Fatalf("p4 still listed:\n%s", out)
	}
}

func TestIPRelease(t *testing.T) {
	h := newHarness(t)
	h.populate()
	// Live: its netns exists on this node.
	h.fails(ExitError, []string{"refusing to release 10.9.0.2", "default/web-1", "/var/run/netns/cni-c1 still exists", "--force"}, "ip", "release", "10.9.0.2")
	// On another node: cannot be checked from here.
	h.fails(ExitError, []string{"node-b"}, "ip", "release", "10.9.0.16")
	// Checked on its own node, gone.
	h.gone("/var/run/netns/cni-c3")
	h.ok("ip", "release", "10.9.0.16", "--node", "node-b")
	// Netns directory not visible here: counts as live.
	delete(h.present, "/var/run/netns")
	h.gone("/var/run/netns/cni-c1")
	h.fails(ExitError, []string{"cannot be checked from here"}, "ip", "release", "fd00:9::1")
	h.present["/var/run/netns"] = true
	out := h.ok("ip", "release", "fd00:9::1", "-o", "json")
	var rel releasedView
	if err := json.Unmarshal([]byte(out), &rel); err != nil || rel.Handle.ID != "net.c1.eth0" || rel.Pool != "p6" || rel.Forced {
		t.Fatalf("release JSON %s: %+v %v", out, rel, err)
	}
	// The handle keeps its other address.
	var ip ipView
	if err := json.Unmarshal([]byte(h.ok("ip", "show", "10.9.0.2", "-o", "json")), &ip); err != nil || ip.Holdings[0].HandleID != "net.c1.eth0" {
		t.Fatalf("ip show after partial release: %+v %v", ip, err)
	}
	h.fails(ExitError, []string{"10.9.0.9 is free"}, "ip", "release", "10.9.0.9")
	h.fails(ExitError, []string{"no pool holds 192.0.2.1"}, "ip", "release", "192.0.2.1")
	h.fails(ExitError, []string{"not an IP address"}, "ip", "release", "10.9.0.999")

	// An owner whose namespace is gone from this node is not live.
	h.ok("ip", "release", "10.9.0.3")
}

func TestIPReleaseOverlappingPools(t *testing.T) {
	h := newHarness(t)
	h.ok(fields("pool add red --cidr 10.80.0.0/24")...)
	h.ok(fields("pool add blue --cidr 10.80.0.0/24 --allow-overlap")...)
	h.store(func(a *allocator.Allocator) {
		h.allocate(a, ipam.Handle{ID: "red.x.eth0", Node: "node-a"}, []string{"red"})
		h.allocate(a, ipam.Handle{ID: "blue.y.eth0", Node: "node-a"}, []string{"blue"})
	})
	h.fails(ExitError, []string{"--pool"}, "ip", "release", "10.80.0.1", "--force")
	h.ok("ip", "release", "10.80.0.1", "--pool", "blue", "--force")
	out := h.ok("ip", "show", "10.80.0.1")
	if !strings.Contains(out, "red.x.eth0") || strings.Contains(out, "blue.y.eth0") {
		t.Fatalf("after releasing blue's 10.80.0.1:\n%s", out)
	}
}

// TestCheckExitStatus damages the store as crashes would (a block held
// without its claim, a claim whose node holds no block, a loan without the
// lender's record): check reports them with exit status 2 and changes
// nothing; check --repair fixes them (3), and a check after finds nothing
// (0). A problem repair leaves to a person (an interrupted pool rm) keeps
// the status at 2.
func TestCheckExitStatus(t *testing.T) {
	h := newHarness(t)
	h.populate()
	h.ok("check")
	h.store(func(a *allocator.Allocator) {
		ctx, s := t.Context(), a.Store()
		c, err := s.GetClaim(ctx, store.BlockRef{Pool: "p4", CIDR: netipPrefix("10.9.0.16/28")})
		if err != nil || c.Node != "node-b" {
			t.Fatalf("node-b's claim: %+v, %v", c, err)
		}
		if err := s.DeleteClaim(ctx, c); err != nil {
			t.Fatal(err)
		}
		if _, err := s.CreateClaim(ctx, store.Claim{BlockRef: store.BlockRef{Pool: "p4", CIDR: netipPrefix("10.9.0.32/28")}, Node: "node-c"}); err != nil {
			t.Fatal(err)
		}
		n, err := s.GetNode(ctx, "node-a")
		if err != nil {
			t.Fatal(err)
		}
		n.Loans = append(n.Loans, store.Loan{Handle: "net.c9.eth0", Lender: "node-b"})
		if _, err := s.UpdateNode(ctx, n); err != nil {
			t.Fatal(err)
		}
	})
	before := h.ok("show", "--blocks", "-o", "json")
	out, _, code := h.run("check", "-o", "json")
	if code != ExitProblems {
		t.Fatalf("check on a damaged store: exit %d, want %d\n%s", code, ExitProblems, out)
	}
	var r checkView
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, p := range r.Problems {
		kinds[string(p.Kind)]++
	}
	if kinds["block-without-claim"] != 1 || kinds["claim-without-block"] != 1 || kinds["loan-without-record"] != 1 || len(r.Problems) != 3 {
		t.Fatalf("problems: %+v", r.Problems)
	}
	h.golden("check_corrupt", h.mustExit(ExitProblems, "check"))
	if h.ok("show", "--blocks", "-o", "json") != before {
		t.Fatal("check without --repair changed the store")
	}
	h.golden("check_repair", h.mustExit(ExitRepaired, "check", "--repair"))
	h.ok("check")
	h.store(func(a *allocator.Allocator) {
		c, err := a.Store().GetClaim(t.Context(), store.BlockRef{Pool: "p4", CIDR: netipPrefix("10.9.0.16/28")})
		if err != nil || c.Node != "node-b" {
			t.Fatalf("node-b's claim after repair: %+v, %v", c, err)
		}
	})
	// What repair cannot fix keeps the status at 2.
	h.store(func(a *allocator.Allocator) {
		p, err := a.Store().GetPool(t.Context(), "p6")
		if err != nil {
			t.Fatal(err)
		}
		p.Spec.Deleting = true
		if _, err := a.Store().UpdatePool(t.Context(), p); err != nil {
			t.Fatal(err)
		}
	})
	h.mustExit(ExitProblems, "check", "--repair")
	h.ok("pool", "rm", "--cancel", "p6")
	h.ok("check")
}

// mustExit runs the CLI and wants exit status code; it returns stdout.
func (h *harness) mustExit(code int, args ...string) string {
	h.t.Helper()
	out, errs, got := h.run(args...)
	if got != code {
		h.t.Fatalf("ipkeeperctl %s: exit %d, want %d\n%s\n%s", strings.Join(args, " "), got, code, out, errs)
	}
	return out
}

func TestGCKeepsWhatMayBeLive(t *testing.T) {
	h := newHarness(t)
	h.populate()
	before := h.ok("show", "--blocks", "--nodes", "-o", "json")
	var v gcView
	if err := json.Unmarshal([]byte(h.ok("gc", "--dry-run", "-o", "json")), &v); err != nil || len(v.Released) != 1 || v.Kept != 1 || !v.DryRun {
		t.Fatalf("dry run: %+v %v", v, err)
	}
	if h.ok("show", "--blocks", "--nodes", "-o", "json") != before {
		t.Fatal("gc --dry-run wrote")
	}
	// Without the netns directory nothing can be judged: nothing released.
	delete(h.present, "/var/run/netns")
	if err := json.Unmarshal([]byte(h.ok("gc", "-o", "json")), &v); err != nil || len(v.Released) != 0 || v.Kept != 2 {
		t.Fatalf("gc without visible netns dir: %+v %v", v, err)
	}
	h.present["/var/run/netns"] = true
	if err := json.Unmarshal([]byte(h.ok("gc", "-o", "json")), &v); err != nil || len(v.Released) != 1 || v.Released[0].Handle != "net.c2.eth0" ||
		strings.Join(v.Released[0].Addrs, ",") != "10.9.0.3,fd00:9::2" {
		t.Fatalf("gc: %+v %v", v, err)
	}
	// node-b's handle is untouched by node-a's gc even with its netns gone.
	h.gone("/var/run/netns/cni-c3")
	if err := json.Unmarshal([]byte(h.ok("gc", "-o", "json")), &v); err != nil || len(v.Released) != 0 {
		t.Fatalf("second gc: %+v %v", v, err)
	}
	if err := json.Unmarshal([]byte(h.ok("gc", "--node", "node-b", "-o", "json")), &v); err != nil || len(v.Released) != 1 || v.Node != "node-b" {
		t.Fatalf("gc on node-b: %+v %v", v, err)
	}
	h.ok("check")
}

func TestDatastoreSelection(t *testing.T) {
	h := newHarness(t)
	h.populate()
	// --config names the same store.
	conf := filepath.Join(h.tmp, "net.conflist")
	writeJSON(t, conf, map[string]any{"cniVersion": "1.0.0", "name": "net", "plugins": []any{
		map[string]any{"type": "bridge", "ipam": map[string]any{"type": "ipkeeper", "datastore": map[string]any{"type": "local", "path": h.dir},
			"ranges": [][]map[string]string{{{"subnet": "10.9.0.0/24"}}}}},
	}})
	delete(h.vars, "IPKEEPER_LOCAL_PATH")
	if out := h.ok("--config", conf, "pool", "list"); !strings.Contains(out, "p4") {
		t.Fatalf("--config store:\n%s", out)
	}
	// The flag overrides the config; an empty store has no pools.
	empty := t.TempDir()
	if out := h.ok("--config", conf, "--local-path", empty, "pool", "list", "-o", "json"); !strings.Contains(out, `"pools": []`) {
		t.Fatalf("--local-path over --config:\n%s", out)
	}
	// The environment, when no --config.
	h.vars["IPKEEPER_LOCAL_PATH"] = h.dir
	if out := h.ok("pool", "list"); !strings.Contains(out, "p4") {
		t.Fatalf("env store:\n%s", out)
	}
	h.fails(ExitError, []string{"endpoints"}, "--datastore", "etcd", "pool", "list")
	h.vars["IPKEEPER_DATASTORE"] = "mongo"
	h.fails(ExitError, []string{"IPKEEPER_DATASTORE", "mongo"}, "pool", "list")
	delete(h.vars, "IPKEEPER_DATASTORE")
	h.fails(ExitError, []string{"nope.conf"}, "--config", filepath.Join(h.tmp, "nope.conf"), "pool", "list")
	// The kubernetes datastore's flags: a kubeconfig that cannot be read
	// is named; partitions are not etcd prefixes and the other way round.
	missing := filepath.Join(h.tmp, "no-kubeconfig")
	h.fails(ExitError, []string{missing}, "--datastore", "kubernetes", "--datastore-kubeconfig", missing, "pool", "list")
	h.fails(ExitError, []string{"Bad_Partition"}, "--datastore", "kubernetes", "--datastore-kubeconfig", missing, "--datastore-prefix", "Bad_Partition", "pool", "list")
	h.fails(ExitError, []string{"--datastore-prefix", "--etcd-prefix"}, "--datastore-prefix", "part", "pool", "list")
	h.fails(ExitError, []string{"--etcd-prefix", "--datastore-prefix"}, "--datastore", "kubernetes", "--etcd-prefix", "/x", "pool", "list")
	// --config's nodeName is the default node.
	conf2 := filepath.Join(h.tmp, "node-b.conf")
	writeJSON(t, conf2, map[string]any{"cniVersion": "1.0.0", "name": "net", "type": "bridge", "ipam": map[string]any{
		"type": "ipkeeper", "nodeName": "node-b", "datastore": map[string]any{"path": h.dir}, "pools": []string{"p4"}}})
	var v gcView
	if err := json.Unmarshal([]byte(h.ok("--config", conf2, "gc", "--dry-run", "-o", "json")), &v); err != nil || v.Node != "node-b" {
		t.Fatalf("node from config: %+v %v", v, err)
	}
}

func TestNodeNameDefaults(t *testing.T) {
	h := newHarness(t)
	h.populate()
	for _, c := range []struct {
		vars map[string]string
		want string
	}{
		{map[string]string{"NODENAME": "n1", "KUBERNETES_NODE_NAME": "n2"}, "n1"},
		{map[string]string{"KUBERNETES_NODE_NAME": "n2"}, "n2"},
		{map[string]string{}, "host-fallback"},
	} {
		h.vars = map[string]string{"IPKEEPER_LOCAL_PATH": h.dir}
		for k, v := range c.vars {
			h.vars[k] = v
		}
		var v gcView
		if err := json.Unmarshal([]byte(h.ok("gc", "--dry-run", "-o", "json")), &v); err != nil || v.Node != c.want {
			t.Errorf("env %v: node %q, want %q (%v)", c.vars, v.Node, c.want, err)
		}
	}
}

func TestImportRefusals(t *testing.T) {
	h := newHarness(t)
	h.ok(fields("pool add default --cidr 100.112.0.0/16")...)
	h.fails(ExitError, []string{"overlaps"}, "import", "calico", "--file", calicoFile)
	h.fails(ExitError, []string{"--file"}, "import", "calico")
	h.fails(ExitError, []string{"not both"}, "import", "calico", "--file", calicoFile, "--etcd-endpoints", "127.0.0.1:1")
	h.fails(ExitError, []string{"--file"}, "import", "whereabouts")
	h.fails(ExitError, []string{"IPPool"}, "import", "whereabouts", "--file", calicoFile)
	// Standard input.
	data, err := os.ReadFile(whereaboutsFile)
	if err != nil {
		t.Fatal(err)
	}
	h.stdin = string(data)
	out := h.ok("import", "whereabouts", "--file", "-", "--network", "test", "-o", "json")
	if !strings.Contains(out, `"172.18.178.199"`) {
		t.Fatalf("import from stdin:\n%s", out)
	}
}

func writeJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func netipPrefix(s string) netip.Prefix { return netip.MustParsePrefix(s) }

// TestGCAdoptsClaims: after a plugin was killed between claiming a block
// and writing its node object, and its container's namespace is gone, gc
// releases the handle and adopts the claimed block into the node's object,
// so that check finds nothing; a dry run adopts nothing, and another
// node's claim is left to that node.
func TestGCAdoptsClaims(t *testing.T) {
	for _, fam := range []struct{ name, pool, block, other string }{
		{"IPv4", "p4", "10.9.0.32/28", "10.9.0.48/28"},
		{"IPv6", "p6", "fd00:9::20/124", "fd00:9::30/124"},
	} {
		t.Run(fam.name, func(t *testing.T) {
			h := newHarness(t)
			h.populate()
			h.store(func(a *allocator.Allocator) {
				for _, c := range []store.Claim{
					{BlockRef: store.BlockRef{Pool: fam.pool, CIDR: netipPrefix(fam.block)}, Node: "node-a"},
					{BlockRef: store.BlockRef{Pool: fam.pool, CIDR: netipPrefix(fam.other)}, Node: "node-b"},
				} {
					if _, err := a.Store().CreateClaim(t.Context(), c); err != nil {
						t.Fatal(err)
					}
				}
			})
			h.mustExit(ExitProblems, "check")
			// A claimed block its node does not hold yet is free as a whole.
			var ip ipView
			first := netipPrefix(fam.block).Addr().Next()
			if err := json.Unmarshal([]byte(h.ok("ip", "show", first.String(), "-o", "json")), &ip); err != nil ||
				ip.Holdings[0].State != stateFree || ip.Holdings[0].BlockNode != "node-a" {
				t.Fatalf("ip show %s in the claimed block: %+v %v", first, ip, err)
			}
			var orphan blocksView
			if err := json.Unmarshal([]byte(h.ok("block", "show", fam.block, "-o", "json")), &orphan); err != nil ||
				len(orphan.Blocks) != 1 || orphan.Blocks[0].Node != "node-a" || orphan.Blocks[0].Free != 16 || orphan.Blocks[0].InUse != 0 {
				t.Fatalf("block show of the claimed block: %+v %v", orphan, err)
			}
			var v gcView
			if err := json.Unmarshal([]byte(h.ok("gc", "--dry-run", "-o", "json")), &v); err != nil || len(v.Adopted) != 0 {
				t.Fatalf("gc --dry-run: %+v %v", v, err)
			}
			if err := json.Unmarshal([]byte(h.ok("gc", "-o", "json")), &v); err != nil || len(v.Released) != 1 ||
				len(v.Adopted) != 1 || v.Adopted[0] != fam.pool+"/"+fam.block {
				t.Fatalf("gc: %+v %v", v, err)
			}
			if out := h.mustExit(ExitProblems, "check"); !strings.Contains(out, fam.other) || strings.Contains(out, fam.block) {
				t.Fatalf("check after node-a's gc: want only node-b's claim of %s reported:\n%s", fam.other, out)
			}
			if err := json.Unmarshal([]byte(h.ok("gc", "--node", "node-b", "-o", "json")), &v); err != nil || len(v.Adopted) != 1 {
				t.Fatalf("gc on node-b: %+v %v", v, err)
			}
			h.ok("check")
			var b blocksView
			if err := json.Unmarshal([]byte(h.ok("block", "show", fam.block, "-o", "json")), &b); err != nil ||
				len(b.Blocks) != 1 || b.Blocks[0].Node != "node-a" || b.Blocks[0].InUse != 0 {
				t.Fatalf("adopted block: %+v %v", b, err)
			}
		})
	}
}

// TestIPReleaseBorrowed: releasing the only address a handle borrowed
// from another node's block leaves no loan behind (check stays clean), for
// IPv4 and IPv6.
func TestIPReleaseBorrowed(t *testing.T) {
	for _, fam := range []struct{ name, cidr string }{{"IPv4", "10.90.0.0/28"}, {"IPv6", "fd00:90::/124"}} {
		t.Run(fam.name, func(t *testing.T) {
			h := newHarness(t)
			h.ok("pool", "add", "one", "--cidr", fam.cidr)
			var borrowed string
			h.store(func(a *allocator.Allocator) {
				h.allocate(a, ipam.Handle{ID: "net.a.eth0", Node: "node-a"}, []string{"one"})
				got := h.allocate(a, ipam.Handle{ID: "net.b.eth0", Node: "node-b"}, []string{"one"})
				borrowed = got.IPs[0].Addr.String()
				n, err := a.Store().GetNode(t.Context(), "node-b")
				if err != nil || len(n.Loans) != 1 {
					t.Fatalf("node-b should borrow from node-a: %+v, %v", n, err)
				}
			})
			h.ok("ip", "release", borrowed, "--force")
			h.ok("check")
			var ip ipView
			if err := json.Unmarshal([]byte(h.ok("ip", "show", borrowed, "-o", "json")), &ip); err != nil || ip.Holdings[0].State != stateFree {
				t.Fatalf("ip show after release: %+v %v", ip, err)
			}
		})
	}
}

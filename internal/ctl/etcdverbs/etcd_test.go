// Package etcdverbs_test runs ipkeeperctl's verbs against a real embedded
// etcd. It is a package of its own because linking the etcd server makes
// its test binary slow to build.
package etcdverbs_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/config"
	"github.com/ipkeeper/ipkeeper/internal/ctl"
	"github.com/ipkeeper/ipkeeper/internal/datastore"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/kv"
	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/store/etcd"
	"github.com/ipkeeper/ipkeeper/internal/store/etcd/etcdtest"
)

type runner struct {
	t      *testing.T
	global []string
	vars   map[string]string
}

func (r *runner) run(args ...string) (string, string, int) {
	var out, errb bytes.Buffer
	code := ctl.Run(context.Background(), append(append([]string{}, r.global...), args...), ctl.Env{
		Stdout: &out, Stderr: &errb, Getenv: func(k string) string { return r.vars[k] },
		Hostname: func() (string, error) { return "h", nil },
		Exists:   func(p string) bool { return p == "/var/run/netns" || p == "/var/run/netns/live" },
	})
	return out.String(), errb.String(), code
}

func (r *runner) ok(args ...string) string {
	r.t.Helper()
	out, errs, code := r.run(args...)
	if code != 0 {
		r.t.Fatalf("ipkeeperctl %v: exit %d\n%s\n%s", args, code, out, errs)
	}
	return out
}

func (r *runner) exit(want int, args ...string) string {
	r.t.Helper()
	out, errs, code := r.run(args...)
	if code != want {
		r.t.Fatalf("ipkeeperctl %v: exit %d, want %d\n%s\n%s", args, code, want, out, errs)
	}
	return errs
}

// TestVerbsOnEtcd runs every verb against etcd, once with the datastore
// given by flags and once by the environment.
func TestVerbsOnEtcd(t *testing.T) {
	srv := etcdtest.ForTest(t, nil)
	for _, c := range []struct {
		name   string
		global []string
		vars   map[string]string
	}{
		{"flags", []string{"--datastore", "etcd", "--etcd-endpoints", srv.Endpoint, "--etcd-prefix", "/by-flags"}, map[string]string{"NODENAME": "node-a"}},
		{"env", nil, map[string]string{"IPKEEPER_DATASTORE": "etcd", "IPKEEPER_ETCD_ENDPOINTS": srv.Endpoint, "IPKEEPER_ETCD_PREFIX": "/by-env", "NODENAME": "node-a"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := &runner{t: t, global: c.global, vars: c.vars}
			ctx := context.Background()
			r.ok("pool", "add", "p4", "--cidr", "10.40.0.0/24", "--block-size", "28")
			r.ok("pool", "add", "p6", "--cidr", "fd40::/120", "--block-size", "124")
			prefix := "/by-flags"
			if c.vars["IPKEEPER_ETCD_PREFIX"] != "" {
				prefix = c.vars["IPKEEPER_ETCD_PREFIX"]
			}
			// The plugin's view of the same store: the typed store, opened
			// as the CLI opens it.
			st, err := datastore.Open(ctx, config.Datastore{Type: config.DatastoreEtcd, Endpoints: []string{srv.Endpoint}, Prefix: prefix,
				DialTimeout: config.DefaultDialTimeout, RequestTimeout: config.DefaultRequestTimeout}, datastore.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			a := allocator.New(st, nil)
			for _, hd := range []ipam.Handle{
				{ID: "net.live.eth0", Node: "node-a", NetNS: "/var/run/netns/live", Pod: "live"},
				{ID: "net.dead.eth0", Node: "node-a", NetNS: "/var/run/netns/dead", Pod: "dead"},
			} {
				if _, err := a.Allocate(ctx, allocator.Request{Handle: hd, Sets: [][]string{{"p4"}, {"p6"}}}); err != nil {
					t.Fatal(err)
				}
			}
			var show struct {
				Pools []struct {
					InUse int `json:"inUse"`
				} `json:"pools"`
				Blocks []struct{} `json:"blocks"`
			}
			if err := json.Unmarshal([]byte(r.ok("show", "--blocks", "--nodes", "-o", "json")), &show); err != nil || show.Pools[0].InUse != 2 || len(show.Blocks) != 2 {
				t.Fatalf("show: %+v %v", show, err)
			}
			if out := r.ok("block", "show", "10.40.0.0/28"); !strings.Contains(out, "net.dead.eth0") {
				t.Fatalf("block show:\n%s", out)
			}
			if out := r.ok("ip", "show", "fd40::1"); !strings.Contains(out, "net.live.eth0") {
				t.Fatalf("ip show:\n%s", out)
			}
			r.exit(1, "ip", "release", "10.40.0.1")
			r.ok("ip", "release", "10.40.0.1", "--force")
			if out := r.ok("gc"); !strings.Contains(out, "net.dead.eth0") {
				t.Fatalf("gc:\n%s", out)
			}
			r.ok("check")
			// A crash between an ADD's claim and its node write: the claim
			// of a block the node does not hold.
			if _, err := st.CreateClaim(ctx, store.Claim{BlockRef: store.BlockRef{Pool: "p4", CIDR: netip.MustParsePrefix("10.40.0.32/28")}, Node: "node-a"}); err != nil {
				t.Fatal(err)
			}
			r.exit(2, "check")
			r.exit(3, "check", "--repair")
			r.ok("check")
			// On import calico --etcd-* name Calico's etcd: ipkeeper's own
			// comes from the environment.
			im := &runner{t: t, vars: map[string]string{"IPKEEPER_DATASTORE": "etcd", "IPKEEPER_ETCD_ENDPOINTS": srv.Endpoint, "IPKEEPER_ETCD_PREFIX": prefix}}
			if c.global != nil {
				errs := r.exit(1, "import", "calico", "--file", "../../importer/testdata/calico-block-100.112.209.128-26.json")
				if !strings.Contains(errs, "IPKEEPER_") {
					t.Errorf("import calico with ipkeeper's etcd in flags: %s", errs)
				}
			}
			im.ok("import", "calico", "--file", "../../importer/testdata/calico-block-100.112.209.128-26.json")
			im.ok("import", "whereabouts", "--file", "../../importer/testdata/whereabouts-ippools.yaml")
			im.ok("import", "calico", "--file", "../../importer/testdata/calico-block-100.112.209.128-26.json")
			r.ok("check")
			if errs := r.exit(1, "pool", "rm", "p6"); !strings.Contains(errs, "1 addresses in use") {
				t.Fatalf("pool rm: %s", errs)
			}
			r.ok("ip", "release", "fd40::1", "--force")
			r.ok("pool", "rm", "p6")
			if out := r.ok("pool", "list"); strings.Contains(out, "p6") || !strings.Contains(out, "calico-100.112.209.128-26") {
				t.Fatalf("pool list:\n%s", out)
			}
		})
	}
}

// TestImportCalicoFromEtcd: import calico --etcd-endpoints reads Calico's
// keys from a real etcd into a local ipkeeper store.
func TestImportCalicoFromEtcd(t *testing.T) {
	srv := etcdtest.ForTest(t, nil)
	ctx := context.Background()
	block, err := os.ReadFile("../../importer/testdata/calico-block-100.112.209.128-26.json")
	if err != nil {
		t.Fatal(err)
	}
	w, err := etcd.Open(ctx, etcd.Config{Endpoints: []string{srv.Endpoint}, Prefix: "/calico"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.Txn(ctx, nil, []kv.Op{
		{Key: "ipam/v2/assignment/ipv4/block/100.112.209.128-26", Value: block},
		{Key: "ipam/v2/host/ip-10-200-205-203/ipv4/block/100.112.209.128-26", Value: []byte(`{"state":"confirmed"}`)},
	}); err != nil {
		t.Fatal(err)
	}
	r := &runner{t: t, vars: map[string]string{"IPKEEPER_LOCAL_PATH": t.TempDir()}}
	out := r.ok("import", "calico", "--etcd-endpoints", srv.Endpoint, "--pool-cidr", "100.112.0.0/12", "-o", "json")
	var res struct {
		Addresses []string `json:"addresses"`
		Changes   []struct {
			Name   string `json:"name"`
			Status string `json:"status"`
		} `json:"changes"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || len(res.Addresses) != 9 || res.Changes[0].Name != "calico-100.112.0.0-12" {
		t.Fatalf("import: %s %v", out, err)
	}
	r.ok("check")
}

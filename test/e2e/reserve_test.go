package e2e

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/kubetest"
	"github.com/ipkeeper/ipkeeper/internal/store/etcd/etcdtest"
)

// reserveBackend is a datastore of the reservation test: the plugin's
// datastore object and ipkeeperctl's (an admin's on Kubernetes, where
// only admins write reservations).
type reserveBackend struct {
	name string
	ds   func(t *testing.T) (plugin, admin map[string]any)
}

var reserveBackends = []reserveBackend{
	{"local", func(t *testing.T) (map[string]any, map[string]any) {
		ds := map[string]any{"type": "local", "path": t.TempDir()}
		return ds, ds
	}},
	{"etcd", func(t *testing.T) (map[string]any, map[string]any) {
		srv := etcdtest.ForTest(t, nil)
		ds := map[string]any{"type": "etcd", "endpoints": []string{srv.Endpoint}, "prefix": "/reserve"}
		return ds, ds
	}},
	{"kubernetes", func(t *testing.T) (map[string]any, map[string]any) {
		srv := kubetest.Start(t)
		kc := srv.ServiceAccountKubeconfig(t, "kube-system", "ipkeeper-controller")
		return map[string]any{"type": "kubernetes", "kubeconfig": kc, "prefix": "reserve"},
			map[string]any{"type": "kubernetes", "kubeconfig": srv.AdminKubeconfig, "prefix": "reserve"}
	}},
}

// TestReservations runs the real plugin binary and ipkeeperctl on each
// datastore, dual-stack: reserving an address in use is refused naming
// its holder; with --when-free it is reserved and the holder keeps it;
// the next address the pools would hand out is reserved too; ADDs then
// run until the IPv4 pool is exhausted (CNI 100) and never get a reserved
// address, in either family; check reports the holder inside the
// reservation as a finding; after the holder's DEL its address is not
// handed out; reserve rm gives it back.
func TestReservations(t *testing.T) {
	needIpkeeper(t)
	needKubeSibling(t)
	needCtl(t)
	for _, b := range reserveBackends {
		t.Run(b.name, func(t *testing.T) { reservations(t, b) })
	}
}

func reservations(t *testing.T, b reserveBackend) {
	plugin, admin := b.ds(t)
	conf := func(ds map[string]any) []byte {
		return mustJSON(t, map[string]any{"cniVersion": "1.1.0", "name": "resv", "type": "bridge",
			"ipam": map[string]any{"type": "ipkeeper", "nodeName": "node-a", "datastore": ds, "blockSize": 28, "ipv6BlockSize": 124,
				"ranges": []any{[]any{map[string]any{"subnet": "10.67.0.0/28"}}, []any{map[string]any{"subnet": "fd67::/124"}}}}})
	}
	netconf := conf(plugin)
	ctlConf := filepath.Join(t.TempDir(), "admin.conf")
	if err := os.WriteFile(ctlConf, conf(admin), 0o600); err != nil {
		t.Fatal(err)
	}
	var gw4 netip.Addr
	addrsOf := func(id string) (v4, v6 netip.Addr) {
		res := ipamAdd(t, id, netconf)
		for _, ip := range res.IPs {
			a, _ := netip.AddrFromSlice(ip.Address.IP)
			if a = a.Unmap(); a.Is4() {
				v4 = a
				gw4, _ = netip.AddrFromSlice(ip.Gateway)
				gw4 = gw4.Unmap()
			} else {
				v6 = a
			}
		}
		if !v4.IsValid() || !v6.IsValid() {
			t.Fatalf("ADD %s: want an IPv4 and an IPv6 address, got %v", id, res.IPs)
		}
		return v4, v6
	}
	held4, held6 := addrsOf("holder")
	// The first ADD made the pools and warmed the node's hint; what the
	// pools hand out next (free queues in order) is reserved below.
	next4, next6 := held4.Next(), held6.Next()

	for _, a := range []netip.Addr{held4, held6} {
		_, stderr, err := ctlRun(ctlConf, "reserve", "add", a.String(), "--note", "router")
		if err == nil || !strings.Contains(string(stderr), "in use") || !strings.Contains(string(stderr), "resv.holder.eth0") {
			t.Fatalf("reserve add of %s in use: %v, stderr %s: want a refusal naming handle resv.holder.eth0", a, err, stderr)
		}
	}
	if out := ctl(t, ctlConf, "reserve", "list", "-o", "json"); !strings.Contains(string(out), `"reservations": []`) {
		t.Fatalf("a refused reserve add stored something:\n%s", out)
	}
	for _, a := range []netip.Addr{held4, held6} {
		ctl(t, ctlConf, "reserve", "add", a.String(), "--note", "router", "--when-free")
	}
	for _, a := range []netip.Addr{next4, next6} {
		ctl(t, ctlConf, "reserve", "add", a.String(), "--note", "printer")
	}
	reserved := []netip.Addr{held4, held6, next4, next6}

	var check struct {
		Problems []json.RawMessage `json:"problems"`
		Findings []struct {
			Kind   string `json:"kind"`
			Addr   string `json:"addr"`
			Handle string `json:"handle"`
		} `json:"findings"`
	}
	decodeJSON(t, ctl(t, ctlConf, "check", "-o", "json"), &check)
	var found []string
	for _, f := range check.Findings {
		if f.Kind == "allocated-in-reservation" && f.Handle == "resv.holder.eth0" {
			found = append(found, f.Addr)
		}
	}
	slices.Sort(found)
	if len(check.Problems) != 0 || !slices.Equal(found, []string{held4.String(), held6.String()}) {
		t.Fatalf("check: problems %s, findings %+v: want the holder's two addresses as findings only", check.Problems, check.Findings)
	}

	var got []netip.Addr
	for i := 0; ; i++ {
		id := fmt.Sprintf("c%02d", i)
		out := ipamRun(t, "ADD", id, netconf)
		if out.ExitCode != 0 {
			wantCNIError(t, "ADD on an exhausted pool", out, 100)
			break
		}
		for _, ip := range parseResult(t, "1.1.0", out.Stdout).IPs {
			a, _ := netip.AddrFromSlice(ip.Address.IP)
			got = append(got, a.Unmap())
		}
		if i > 20 {
			t.Fatalf("no exhaustion after %d ADDs: %v", i, got)
		}
	}
	for _, a := range got {
		if slices.Contains(reserved, a) {
			t.Fatalf("an ADD got reserved address %s (all: %v)", a, got)
		}
	}
	// Every host address of the IPv4 /28 went to an ADD, the gateway or a
	// reservation: the pool was exhausted, not stopped early.
	for a := netip.MustParseAddr("10.67.0.1"); a != netip.MustParseAddr("10.67.0.15"); a = a.Next() {
		if !slices.Contains(got, a) && !slices.Contains(reserved, a) && a != gw4 {
			t.Fatalf("%s was neither handed out nor reserved before the pool was exhausted: %v", a, got)
		}
	}

	if out := ipamRun(t, "DEL", "holder", netconf); out.ExitCode != 0 {
		t.Fatalf("DEL holder:\n%v", out)
	}
	wantCNIError(t, "ADD after the holder's DEL (its address is reserved)", ipamRun(t, "ADD", "after-del", netconf), 100)

	ctl(t, ctlConf, "reserve", "rm", held4.String())
	if v4, _ := addrsOf("after-rm"); v4 != held4 {
		t.Fatalf("after reserve rm the ADD got %s, want the unreserved %s", v4, held4)
	}
}

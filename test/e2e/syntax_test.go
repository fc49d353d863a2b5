package e2e

import (
	"encoding/json"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"
	"sigs.k8s.io/yaml"
)

// readJSON loads a testdata JSON object.
func readJSON(t *testing.T, name string) map[string]any {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return m
}

// asIpkeeper turns a user's ipam section into ipkeeper's: type swapped, an
// explicit local datastore in dir added, everything else as it was. A
// whereabouts section needs the datastore: whereabouts' default (the
// Kubernetes API) is refused, and TestBadInput holds the refusal of these
// same testdata configs without it.
func asIpkeeper(ipam map[string]any, dir string) map[string]any {
	ipam["type"] = "ipkeeper"
	ipam["datastore"] = map[string]any{"type": "local", "path": dir}
	return ipam
}

// singleConfAsList wraps a single-plugin network config into a conflist,
// the way libcni.ConfListFromConf does, with the main plugin swapped for a
// bridge named ipk0.
func singleConfAsList(conf map[string]any, isGateway bool) map[string]any {
	plugin := map[string]any{"type": "bridge", "bridge": "ipk0", "isGateway": isGateway, "ipam": conf["ipam"]}
	return map[string]any{"cniVersion": conf["cniVersion"], "name": conf["name"], "plugins": []any{plugin}}
}

// pluginConf is the stdin the main plugin hands its IPAM plugin.
func (r *runtime) pluginConf(t *testing.T) []byte {
	t.Helper()
	c, err := libcni.InjectConf(r.list.Plugins[0], map[string]any{"name": r.list.Name, "cniVersion": r.list.CNIVersion})
	if err != nil {
		t.Fatal(err)
	}
	return c.Bytes
}

// inRange reports whether lo <= a <= hi.
func inRange(a, lo, hi netip.Addr) bool { return a.Compare(lo) >= 0 && a.Compare(hi) <= 0 }

// hasRoute reports whether the result routes include dst (compared as a
// masked prefix) via gw (invalid gw: any).
func (c *container) hasRoute(dst string, gw netip.Addr) bool {
	want := mustPrefix(dst).Masked()
	for _, r := range c.result.Routes {
		ones, _ := r.Dst.Mask.Size()
		a, _ := netip.AddrFromSlice(r.Dst.IP)
		if netip.PrefixFrom(a.Unmap(), ones).Masked() != want {
			continue
		}
		g, _ := netip.AddrFromSlice(r.GW)
		if !gw.IsValid() || g.Unmap() == gw {
			return true
		}
	}
	return false
}

// TestHostLocalSyntax runs the dual-stack example of host-local's README
// with only the type swapped: one IPv4 and one IPv6 address per container
// from the configured ranges, the configured gateway and routes, ping, DEL.
func TestHostLocalSyntax(t *testing.T) {
	needRoot(t)
	needIpkeeper(t)
	ipam := asIpkeeper(readJSON(t, "host-local-readme.json")["ipam"].(map[string]any), t.TempDir())
	h := newHost(t, ipkeeperBin)
	r := newRuntime(t, h, bridgeConf("ipk-e2e-hostlocal", "1.1.0", true, ipam))

	var cs []*container
	seen := map[netip.Addr]string{}
	for i := range 3 {
		c := r.mustAdd(t, idf("hl-%d", i))
		v4, v6 := c.addrs(t, 4), c.addrs(t, 6)
		if len(v4) != 1 || len(v6) != 1 {
			t.Fatalf("%s: want one IPv4 and one IPv6 address (two range sets), got %v", c.id, c.result.IPs)
		}
		a4, a6 := v4[0], v6[0]
		switch {
		case inRange(a4, mustAddr("10.10.1.20"), mustAddr("10.10.3.50")):
			if gw := c.gateway(t, 4); gw != mustAddr("10.10.0.254") {
				t.Errorf("%s: %v with gateway %v, want the configured 10.10.0.254", c.id, a4, gw)
			}
		case inRange(a4, mustAddr("172.16.5.1"), mustAddr("172.16.5.254")):
		default:
			t.Fatalf("%s: IPv4 %v is in neither range of the first range set", c.id, a4)
		}
		if !inRange(a6, mustAddr("3ffe:ffff:0:1ff::10"), mustAddr("3ffe:ffff:0:1ff::20")) {
			t.Fatalf("%s: IPv6 %v outside rangeStart..rangeEnd ::10-::20", c.id, a6)
		}
		for _, a := range []netip.Addr{a4, a6} {
			if prev, dup := seen[a]; dup {
				t.Fatalf("%s and %s both got %v", prev, c.id, a)
			}
			seen[a] = c.id
		}
		for _, rt := range []struct{ dst, gw string }{
			{"0.0.0.0/0", ""}, {"192.168.0.0/16", "10.10.5.1"}, {"3ffe:ffff:0:01ff::1/64", ""},
		} {
			var gw netip.Addr
			if rt.gw != "" {
				gw = mustAddr(rt.gw)
			}
			if !c.hasRoute(rt.dst, gw) {
				t.Errorf("%s: configured route %s via %q missing from result routes %v", c.id, rt.dst, rt.gw, c.result.Routes)
			}
		}
		cs = append(cs, c)
	}
	for _, c := range cs {
		ping(t, c.ns, c.gateway(t, 4).String())
		ping(t, c.ns, c.gateway(t, 6).String())
	}
	ping(t, cs[0].ns, cs[1].addrs(t, 6)[0].String())

	gone := cs[1]
	if err := r.del(t, gone); err != nil {
		t.Fatalf("DEL %s: %v", gone.id, err)
	}
	held := allocated(t, r.confFile)
	for _, a := range append(gone.addrs(t, 4), gone.addrs(t, 6)...) {
		if slices.Contains(held, a) {
			t.Errorf("DEL %s: %v still allocated", gone.id, a)
		}
	}
	for _, c := range []*container{cs[0], cs[2]} {
		for _, a := range append(c.addrs(t, 4), c.addrs(t, 6)...) {
			if !slices.Contains(held, a) {
				t.Errorf("DEL %s released %v of %s", gone.id, a, c.id)
			}
		}
	}
}

// TestWhereaboutsSyntax runs the whereabouts README example (range +
// exclude) with only the type swapped and a bridge without a gateway:
// containers reach each other, exactly the nine addresses the config allows
// are handed out, then ADD fails with code 100, and DEL releases.
func TestWhereaboutsSyntax(t *testing.T) {
	needRoot(t)
	needIpkeeper(t)
	conf := readJSON(t, "whereabouts-readme.json")
	asIpkeeper(conf["ipam"].(map[string]any), t.TempDir())
	h := newHost(t, ipkeeperBin)
	r := newRuntime(t, h, singleConfAsList(conf, false))

	// 192.168.2.224/28 without network .224, broadcast .239, the exclude
	// CIDR 192.168.2.229/30 (.228-.231) and .236.
	var usable []netip.Addr
	for _, s := range strings.Fields("225 226 227 232 233 234 235 237 238") {
		usable = append(usable, mustAddr("192.168.2."+s))
	}

	var cs []*container
	var got []netip.Addr
	for i := range 3 {
		c := r.mustAdd(t, idf("wa-%d", i))
		a := c.addr4(t)
		if !slices.Contains(usable, a) || slices.Contains(got, a) {
			t.Fatalf("%s got %v: not one of the free usable addresses %v (already handed out: %v)", c.id, a, usable, got)
		}
		got = append(got, a)
		cs = append(cs, c)
	}
	for _, c := range cs[1:] {
		ping(t, cs[0].ns, c.addr4(t).String())
	}

	// Fill the rest directly through the plugin: exactly the usable set.
	stdin := r.pluginConf(t)
	for i := range len(usable) - len(cs) {
		res := ipamAdd(t, idf("wa-fill-%d", i), stdin)
		if len(res.IPs) != 1 {
			t.Fatalf("fill %d: %v", i, res.IPs)
		}
		a, _ := netip.AddrFromSlice(res.IPs[0].Address.IP)
		got = append(got, a.Unmap())
	}
	if slices.SortFunc(got, netip.Addr.Compare); !slices.Equal(got, usable) {
		t.Fatalf("handed out %v, want exactly %v", got, usable)
	}
	out := ipamRun(t, "ADD", "wa-one-too-many", stdin)
	wantCNIError(t, "ADD on the exhausted range", out, codePoolExhausted)

	if err := r.del(t, cs[1]); err != nil {
		t.Fatalf("DEL %s: %v", cs[1].id, err)
	}
	if slices.Contains(allocated(t, r.confFile), cs[1].addr4(t)) {
		t.Fatalf("DEL %s: %v still allocated", cs[1].id, cs[1].addr4(t))
	}
	ping(t, cs[0].ns, cs[2].addr4(t).String())
}

// nadConfig reads the production NetworkAttachmentDefinition and returns its
// CNI config.
func nadConfig(t *testing.T) map[string]any {
	t.Helper()
	b, err := os.ReadFile("testdata/network-attachment-definition.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var nad struct {
		Spec struct {
			Config string `json:"config"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(b, &nad); err != nil {
		t.Fatal(err)
	}
	var conf map[string]any
	if err := json.Unmarshal([]byte(nad.Spec.Config), &conf); err != nil {
		t.Fatalf("spec.config: %v", err)
	}
	if conf["name"] == nil {
		conf["name"] = "ipk-e2e-nad" // Multus names it after the NAD
	}
	return conf
}

// TestNetworkAttachmentDefinition runs the ipam section of a production
// NetworkAttachmentDefinition (whereabouts, range_start..range_end = five
// addresses, six routes), with an explicit local datastore added (without
// one it is refused, see TestBadInput), under bridge: five ADDs succeed with the routes
// in the result and in the container, the sixth fails with code 100, and
// after a DEL it succeeds with the freed address.
func TestNetworkAttachmentDefinition(t *testing.T) {
	needRoot(t)
	needIpkeeper(t)
	conf := nadConfig(t)
	ipam := asIpkeeper(conf["ipam"].(map[string]any), t.TempDir())
	h := newHost(t, ipkeeperBin)
	r := newRuntime(t, h, singleConfAsList(conf, true))

	type route struct{ dst, gw string }
	var routes []route
	for _, r := range ipam["routes"].([]any) {
		m := r.(map[string]any)
		routes = append(routes, route{m["dst"].(string), m["gw"].(string)})
	}
	if len(routes) != 6 {
		t.Fatalf("testdata changed: %d routes", len(routes))
	}

	var cs []*container
	seen := map[netip.Addr]string{}
	for i := range 5 {
		c := r.mustAdd(t, idf("nad-%d", i))
		a := c.addr4(t)
		if !inRange(a, mustAddr("172.18.178.196"), mustAddr("172.18.178.200")) {
			t.Fatalf("%s got %v outside range_start..range_end", c.id, a)
		}
		if prev, dup := seen[a]; dup {
			t.Fatalf("%s and %s both got %v", prev, c.id, a)
		}
		seen[a] = c.id
		for _, rt := range routes {
			if !c.hasRoute(rt.dst, mustAddr(rt.gw)) {
				t.Errorf("%s: route %s via %s missing from the result: %v", c.id, rt.dst, rt.gw, c.result.Routes)
			}
		}
		ping(t, c.ns, c.gateway(t, 4).String())
		cs = append(cs, c)
	}
	table := nsExec(t, cs[0].ns, "ip", "-4", "route", "show")
	for _, rt := range routes {
		want := strings.TrimSuffix(rt.dst, "/32") + " via " + rt.gw
		if !strings.Contains(table, want) {
			t.Errorf("container route table lacks %q:\n%s", want, table)
		}
	}

	sixth := r.newContainer(t, "nad-5")
	code, msg := cniCode(t, r.add(t, sixth))
	if code != codePoolExhausted {
		t.Fatalf("sixth ADD: code %d (%s), want %d", code, msg, codePoolExhausted)
	}
	t.Logf("sixth ADD: code %d: %s", code, msg)

	freed := cs[3].addr4(t)
	if err := r.del(t, cs[3]); err != nil {
		t.Fatalf("DEL %s: %v", cs[3].id, err)
	}
	// The failed attempt left a veth behind in the container namespace, as
	// bridge does; a runtime would DEL it, and so do we before retrying.
	if err := r.del(t, sixth); err != nil {
		t.Fatalf("DEL after the failed ADD: %v", err)
	}
	if err := r.add(t, sixth); err != nil {
		t.Fatalf("ADD after a DEL freed %v: %v", freed, err)
	}
	if a := sixth.addr4(t); a != freed {
		t.Fatalf("ADD after DEL got %v, want the only free address %v", a, freed)
	}
	ping(t, sixth.ns, sixth.gateway(t, 4).String())
}

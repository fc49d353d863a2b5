package ctl

import (
	"strings"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
)

// populateRoutes makes a dual-stack scene for routes: node-a and node-b
// each hold blocks of p4 and p6, and node-b borrowed one address of each
// family in node-a's only block of the one-block pools s4 and s6.
func (h *harness) populateRoutes() {
	h.t.Helper()
	h.populate()
	h.ok("pool", "add", "s4", "--cidr", "10.8.0.0/28", "--block-size", "28")
	h.ok("pool", "add", "s6", "--cidr", "fd00:8::/124", "--block-size", "124")
	h.store(func(a *allocator.Allocator) {
		h.allocate(a, ipam.Handle{ID: "net.c4.eth0", Network: "net", ContainerID: "c4", IfName: "eth0", Node: "node-b",
			Namespace: "default", Pod: "db-0"}, []string{"p6"})
		h.allocate(a, ipam.Handle{ID: "net.c5.eth0", Network: "net", ContainerID: "c5", IfName: "eth0", Node: "node-a",
			Namespace: "default", Pod: "web-3"}, []string{"s4"}, []string{"s6"})
		h.allocate(a, ipam.Handle{ID: "net.c6.eth0", Network: "net", ContainerID: "c6", IfName: "eth0", Node: "node-b",
			Namespace: "default", Pod: "db-1"}, []string{"s4"}, []string{"s6"})
	})
}

var routeAddrs = []string{"--node-address", "node-a=192.0.2.11", "--node-address", "node-a=2001:db8::11",
	"--node-address", "node-b=192.0.2.12", "--node-address", "node-b=2001:db8::12"}

// TestGoldenRoutes pins every format of routes (go test -update rewrites
// testdata/routes_*.golden).
func TestGoldenRoutes(t *testing.T) {
	h := newHarness(t)
	h.populateRoutes()
	for _, format := range []string{"table", "json", "bird", "frr"} {
		t.Run(format, func(t *testing.T) {
			h.t = t
			h.golden("routes_"+format, h.ok(append([]string{"routes", "-o", format}, routeAddrs...)...))
		})
	}
}

func TestRoutesUnknownAddress(t *testing.T) {
	h := newHarness(t)
	h.populateRoutes()
	// node-b's IPv6 address is missing.
	args := []string{"routes", "--node-address", "node-a=192.0.2.11", "--node-address", "node-a=2001:db8::11", "--node-address", "node-b=192.0.2.12"}
	h.fails(ExitError, []string{`node "node-b" has no known IPv6 address`, "fd00:9::10/124", "--node-address", "--skip-unknown"}, args...)
	out, errs, code := h.run(append(args, "--skip-unknown", "-o", "frr")...)
	if code != 0 || !strings.Contains(errs, "node=node-b family=IPv6") {
		t.Fatalf("--skip-unknown: exit %d, stderr:\n%s", code, errs)
	}
	if strings.Contains(out, "ipv6 route fd00:9::10/124") || !strings.Contains(out, "ip route 10.9.0.16/28 192.0.2.12") || !strings.Contains(out, "ipv6 route fd00:9::/124 2001:db8::11") {
		t.Fatalf("--skip-unknown printed:\n%s", out)
	}
	// The address replaces nothing but its family's.
	h.fails(ExitError, []string{`node "node-a" is given two IPv4 addresses`}, "routes", "--node-address", "node-a=192.0.2.11", "--node-address", "node-a=192.0.2.99")
	h.fails(ExitError, []string{`"node-a=host"`}, "routes", "--node-address", "node-a=host")
	h.fails(ExitError, []string{`-o "xml"`, "bird or frr"}, "routes", "-o", "xml")
	// bird and frr are formats of routes only.
	h.fails(ExitError, []string{`-o "bird"`}, "show", "-o", "bird")
}

func TestRoutesEmpty(t *testing.T) {
	h := newHarness(t)
	if out := h.ok("routes", "-o", "json"); out != "{\n  \"nodes\": []\n}\n" {
		t.Fatalf("routes on an empty store: %q", out)
	}
}

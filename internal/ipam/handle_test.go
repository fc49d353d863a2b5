package ipam_test

import (
	"net/netip"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
)

type attachment struct{ network, container, ifname string }

// TestHandleIDUnambiguous: attachments whose parts contain dots got the
// same "<network>.<container>.<ifname>" ID (and so the same address, and
// DEL of one released the other's); each pair below must get two IDs.
func TestHandleIDUnambiguous(t *testing.T) {
	for _, tc := range []struct {
		name string
		a, b attachment
	}{
		{"dot moves from container to ifname", attachment{"n", "a.b", "eth0"}, attachment{"n", "a", "b.eth0"}},
		{"dot moves from network to container", attachment{"n", "x.y", "eth0"}, attachment{"n.x", "y", "eth0"}},
		{"VLAN interface", attachment{"net", "c", "eth0.100"}, attachment{"net", "c.eth0", "100"}},
		{"escape-looking container ID", attachment{"n", "a%2Eb", "eth0"}, attachment{"n", "a.b", "eth0"}},
		{"escaped percent", attachment{"n", "a%25", "eth0"}, attachment{"n", "a%", "eth0"}},
		{"empty parts", attachment{"n.", "", "eth0"}, attachment{"n", ".", "eth0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ida := ipam.HandleID(tc.a.network, tc.a.container, tc.a.ifname)
			idb := ipam.HandleID(tc.b.network, tc.b.container, tc.b.ifname)
			if ida == idb {
				t.Fatalf("%+v and %+v share handle ID %q", tc.a, tc.b, ida)
			}
			for _, at := range []attachment{tc.a, tc.b} {
				id := ipam.HandleID(at.network, at.container, at.ifname)
				n, c, i, ok := ipam.ParseHandleID(id)
				if !ok || (attachment{n, c, i}) != at {
					t.Errorf("ParseHandleID(%q) = %q, %q, %q, %v; want %+v", id, n, c, i, ok, at)
				}
			}
		})
	}
}

// TestHandleIDCompatible: IDs of attachments without '.' or '%' in their
// parts are what earlier versions stored, so existing stores stay valid
// without migration.
func TestHandleIDCompatible(t *testing.T) {
	for _, at := range []attachment{
		{"k8s-pod-network", "884e11ced699fe17a493ffd59f18c97fd090fd8150411a11643a280a8250c510", "eth0"},
		{"macvlan-conf", "c1", "net1"},
		{"n", "", ""},
	} {
		if got, old := ipam.HandleID(at.network, at.container, at.ifname), ipam.LegacyHandleID(at.network, at.container, at.ifname); got != old {
			t.Errorf("HandleID(%+v) = %q, earlier versions stored %q", at, got, old)
		}
	}
	if got, want := ipam.HandleID("n.x", "a%b", "eth0.100"), "n%2Ex.a%25b.eth0%2E100"; got != want {
		t.Errorf("HandleID = %q, want %q", got, want)
	}
}

// TestParseHandleIDRejects lists IDs HandleID never makes.
func TestParseHandleIDRejects(t *testing.T) {
	for _, id := range []string{"", "a.b", "a.b.c.d", "n.a%2e.eth0", "n.a%.eth0", "n.a%2.eth0", "n.a%41.eth0", "calico-import.unknown.10.0.0.1"} {
		if n, c, i, ok := ipam.ParseHandleID(id); ok {
			t.Errorf("ParseHandleID(%q) = %q, %q, %q, true; want false", id, n, c, i)
		}
	}
}

// FuzzHandleID checks that HandleID is injective and that ParseHandleID
// inverts it, for any strings.
func FuzzHandleID(f *testing.F) {
	f.Add("n", "a.b", "eth0", "n", "a", "b.eth0")
	f.Add("n", "x.y", "eth0", "n.x", "y", "eth0")
	f.Add("n", "%2E", "", "n", ".", "")
	f.Fuzz(func(t *testing.T, n1, c1, i1, n2, c2, i2 string) {
		a, b := attachment{n1, c1, i1}, attachment{n2, c2, i2}
		ida, idb := ipam.HandleID(n1, c1, i1), ipam.HandleID(n2, c2, i2)
		if (ida == idb) != (a == b) {
			t.Fatalf("HandleID(%+v) = %q, HandleID(%+v) = %q", a, ida, b, idb)
		}
		n, c, i, ok := ipam.ParseHandleID(ida)
		if !ok || (attachment{n, c, i}) != a {
			t.Fatalf("ParseHandleID(%q) = %q, %q, %q, %v; want %+v", ida, n, c, i, ok, a)
		}
	})
}

func TestSameAddrs(t *testing.T) {
	ip := func(s string) ipam.HandleIP { return ipam.HandleIP{Addr: netip.MustParseAddr(s)} }
	v4, v6, other := ip("10.0.0.5"), ip("fd00::5"), ip("10.0.0.6")
	for _, tc := range []struct {
		name string
		x, y []ipam.HandleIP
		want bool
	}{
		{"both empty", nil, nil, true},
		{"same order", []ipam.HandleIP{v4, v6}, []ipam.HandleIP{v4, v6}, true},
		{"other order", []ipam.HandleIP{v4, v6}, []ipam.HandleIP{v6, v4}, true},
		{"one more", []ipam.HandleIP{v4}, []ipam.HandleIP{v4, v6}, false},
		{"another IPv4 address", []ipam.HandleIP{v4, v6}, []ipam.HandleIP{other, v6}, false},
		{"IPv6 only vs IPv4 only", []ipam.HandleIP{v6}, []ipam.HandleIP{v4}, false},
	} {
		if got := ipam.SameAddrs(tc.x, tc.y); got != tc.want {
			t.Errorf("%s: SameAddrs = %v, want %v", tc.name, got, tc.want)
		}
	}
}

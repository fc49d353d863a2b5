package ctl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
)

// reserveFamilies are the IPv4 and IPv6 cases of the reserve tests: a
// pool of one block, an address its first pod gets, and a CIDR of it.
var reserveFamilies = []struct {
	name, pool, cidr, block, held, reserved string
	usable                                  int
}{
	{"IPv4", "r4", "10.9.0.0/28", "28", "10.9.0.1", "10.9.0.4/30", 14},
	{"IPv6", "r6", "fd00:9::/124", "124", "fd00:9::1", "fd00:9::4/126", 15},
}

func podHandle(c string) ipam.Handle {
	return ipam.Handle{ID: "net." + c + ".eth0", Network: "net", ContainerID: c, IfName: "eth0", Node: "node-a",
		Namespace: "default", Pod: "pod-" + c}
}

// fill allocates from pool until it is exhausted and returns what it got.
func fill(t *testing.T, a *allocator.Allocator, pool, prefix string) []netip.Addr {
	t.Helper()
	var got []netip.Addr
	for i := 0; ; i++ {
		h, err := a.Allocate(context.Background(), allocator.Request{Handle: podHandle(fmt.Sprintf("%s%d", prefix, i)), Sets: [][]string{{pool}}})
		if errors.Is(err, allocator.ErrExhausted) {
			return got
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, h.IPs[0].Addr)
	}
}

// reserve add refuses an address in use naming its holder and stores
// nothing; --when-free reserves it and the holder keeps it; allocations
// skip every reserved address until the pool is exhausted; the address
// released under a --when-free reservation is never handed out again
// while reserved; reserve rm gives it back.
func TestReserveLifecycle(t *testing.T) {
	for _, f := range reserveFamilies {
		t.Run(f.name, func(t *testing.T) {
			h := newHarness(t)
			h.ok("pool", "add", f.pool, "--cidr", f.cidr, "--block-size", f.block)
			h.store(func(a *allocator.Allocator) {
				if got := h.allocate(a, podHandle("c1"), []string{f.pool}); got.IPs[0].Addr.String() != f.held {
					t.Fatalf("first pod got %s, the test expects %s", got.IPs[0].Addr, f.held)
				}
			})
			errs := h.fails(ExitError, []string{"in use", f.held, `"net.c1.eth0"`, "default/pod-c1", `"node-a"`, "--when-free"},
				"reserve", "add", f.held, "--note", "router")
			if strings.Count(errs, "\n") > 2 {
				t.Errorf("the refusal is not one clear message:\n%s", errs)
			}
			if out := h.ok("reserve", "list", "-o", "json"); !strings.Contains(out, `"reservations": []`) {
				t.Fatalf("a refused reserve add stored something:\n%s", out)
			}
			h.fails(ExitError, []string{"--note"}, "reserve", "add", f.reserved)
			h.fails(ExitError, []string{"no pool"}, "reserve", "add", "192.0.2.0/30", "--note", "x")
			h.fails(ExitError, []string{"host bits"}, "reserve", "add", strings.Replace(f.reserved, "4/", "5/", 1), "--note", "x")

			out := h.ok("reserve", "add", f.held, "--note", "router", "--when-free")
			if !strings.Contains(out, "net.c1.eth0") || !strings.Contains(out, "kept until released") {
				t.Errorf("reserve add --when-free does not say who keeps the address:\n%s", out)
			}
			h.ok("reserve", "add", f.reserved, "--note", "printers\tfloor 2", "--pool", f.pool)
			h.fails(ExitError, []string{"already reserved"}, "reserve", "add", f.reserved, "--note", "again")

			var l reservationList
			if err := json.Unmarshal([]byte(h.ok("reserve", "list", "-o", "json")), &l); err != nil {
				t.Fatal(err)
			}
			if len(l.Reservations) != 2 || !l.Reservations[0].WhenFree || l.Reservations[1].Note != "printers\tfloor 2" || l.Reservations[0].Created.IsZero() {
				t.Fatalf("reserve list = %+v", l)
			}
			if y := h.ok("reserve", "list", "-o", "yaml"); !strings.Contains(y, "whenFree: true") {
				t.Errorf("reserve list -o yaml:\n%s", y)
			}
			if tab := h.ok("reserve", "list"); !strings.Contains(tab, "WHEN FREE") || !strings.Contains(tab, "printers floor 2") {
				t.Errorf("reserve list table:\n%s", tab)
			}
			var rep struct {
				Problems []json.RawMessage `json:"problems"`
				Findings []struct {
					Kind, Pool, Block, Addr, Handle, Node, Detail string
				} `json:"findings"`
			}
			if err := json.Unmarshal([]byte(h.ok("check", "-o", "json")), &rep); err != nil {
				t.Fatal(err)
			}
			if len(rep.Problems) != 0 || len(rep.Findings) != 1 || rep.Findings[0].Kind != "allocated-in-reservation" ||
				rep.Findings[0].Addr != f.held || rep.Findings[0].Handle != "net.c1.eth0" || !strings.Contains(rep.Findings[0].Detail, "default/pod-c1") {
				t.Fatalf("check does not report the allocation inside the reservation, with its holder, as a finding only: %+v", rep)
			}
			if tab := h.ok("check"); !strings.Contains(tab, "1 allocations inside reservations") {
				t.Errorf("check table:\n%s", tab)
			}
			if ip := h.ok("ip", "show", f.held); !strings.Contains(ip, "net.c1.eth0") {
				t.Errorf("the holder lost its address:\n%s", ip)
			}

			reserved := netip.MustParsePrefix(f.reserved)
			held := netip.MustParseAddr(f.held)
			h.store(func(a *allocator.Allocator) {
				got := fill(t, a, f.pool, "a")
				for _, ad := range got {
					if reserved.Contains(ad) || ad == held {
						t.Errorf("allocation handed out reserved %s", ad)
					}
				}
				if want := f.usable - 1 - 4; len(got) != want {
					t.Errorf("got %d addresses before exhaustion, want %d: %v", len(got), want, got)
				}
				if _, err := a.Release(context.Background(), "node-a", "net.c1.eth0"); err != nil {
					t.Fatal(err)
				}
				if again := fill(t, a, f.pool, "b"); len(again) != 0 {
					t.Fatalf("the address released under a --when-free reservation was handed out again: %v", again)
				}
				if _, err := a.Allocate(context.Background(), allocator.Request{Handle: podHandle("d"), Sets: [][]string{{f.pool}}, Want: []netip.Addr{held}}); err == nil {
					t.Fatalf("a request for the reserved %s was granted", held)
				}
			})

			h.fails(ExitError, []string{"not reserved"}, "reserve", "rm", "10.99.0.1")
			if out := h.ok("reserve", "rm", f.held); !strings.Contains(out, "removed") {
				t.Errorf("reserve rm: %s", out)
			}
			h.store(func(a *allocator.Allocator) {
				if got := fill(t, a, f.pool, "c"); len(got) != 1 || got[0] != held {
					t.Fatalf("after reserve rm the pool hands out %v, want %s", got, held)
				}
			})
		})
	}
}

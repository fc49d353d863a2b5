package consistency

import (
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
)

// TestRecoveredHandleAttachment: a handle Repair recreates from a block's
// owner name gets the attachment its ID names when the ID splits
// unambiguously (so that attachment's DEL frees it), and none when it is
// an earlier version's dot-joined name with a dot in a part, which could
// be either of several attachments: neither one's DEL may free it on a
// guess (the address stays taken until `ip release`). IPv4 and IPv6.
func TestRecoveredHandleAttachment(t *testing.T) {
	for _, f := range families {
		t.Run(f.name, func(t *testing.T) {
			for _, tc := range []struct {
				name  string
				owner string
				// frees and keeps are attachments whose DEL must, and
				// must not, free the address.
				frees []attachment
				keeps []attachment
			}{
				{"unambiguous ID", ipam.HandleID("n.a", "b", "eth0"),
					[]attachment{{"n.a", "b", "eth0"}}, []attachment{{"n", "a.b", "eth0"}}},
				{"earlier version's ambiguous ID", ipam.LegacyHandleID("n", "a.b", "eth0"),
					nil, []attachment{{"n", "a.b", "eth0"}, {"n.a", "b", "eth0"}, {"n", "a", "b.eth0"}}},
			} {
				t.Run(tc.name, func(t *testing.T) {
					fx := newFixture(t, f)
					ip := fx.ip("net.a0.eth0")
					edit(fx, fx.blockKey("net.a0.eth0"), func(b *ipam.Block) { b.Owners[ordOf(*b, ip.Addr)] = tc.owner })
					fx.del(allocator.HandleKey("net.a0.eth0"))
					res, err := Repair(fx.ctx, fx.store)
					if err != nil || len(res.Remaining) != 0 {
						t.Fatalf("Repair = %+v, %v", res, err)
					}
					for _, at := range tc.keeps {
						if freed, err := fx.alloc.Release(fx.ctx, at.id()); err != nil || len(freed) != 0 {
							t.Fatalf("DEL of %+v freed %v, %v; the recovered %q is not known to be its", at, freed, err, tc.owner)
						}
					}
					for _, at := range tc.frees {
						if freed, err := fx.alloc.Release(fx.ctx, at.id()); err != nil || len(freed) != 1 || freed[0] != ip.Addr {
							t.Fatalf("DEL of %+v freed %v, %v; want %s", at, freed, err, ip.Addr)
						}
					}
					if r := fx.check(); len(r.Problems) != 0 {
						t.Fatalf("check: %+v", r.Problems)
					}
				})
			}
		})
	}
}

type attachment struct{ network, container, ifname string }

func (a attachment) id() string { return ipam.HandleID(a.network, a.container, a.ifname) }

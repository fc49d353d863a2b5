package store

import (
	"maps"
	"slices"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
)

// mutateNode applies ops, pairs of an operation and its argument, to a
// deep copy of n: the ways a node's records can disagree with its blocks'
// owners (an address moved, repeated in a record or in two, an owner
// dropped, added or changed), and others Validate checks first.
func mutateNode(n Node, ops []byte) Node {
	n.Blocks = slices.Clone(n.Blocks)
	for i := range n.Blocks {
		n.Blocks[i].Owners = maps.Clone(n.Blocks[i].Owners)
		n.Blocks[i].Free = slices.Clone(n.Blocks[i].Free)
	}
	n.Handles = slices.Clone(n.Handles)
	for i := range n.Handles {
		n.Handles[i].IPs = slices.Clone(n.Handles[i].IPs)
	}
	for k := 0; k+1 < len(ops); k += 2 {
		op, arg := ops[k], int(ops[k+1])
		if len(n.Handles) == 0 || len(n.Blocks) == 0 {
			return n
		}
		h := &n.Handles[arg%len(n.Handles)]
		b := &n.Blocks[arg%len(n.Blocks)]
		other := n.Handles[(arg/3)%len(n.Handles)].ID
		switch op % 10 {
		case 0: // an address moved within its block
			if len(h.IPs) > 0 {
				ip := &h.IPs[arg%len(h.IPs)]
				if bi := slices.IndexFunc(n.Blocks, func(b ipam.Block) bool { return b.Pool == ip.Pool && b.CIDR == ip.Block }); bi >= 0 {
					ip.Addr = n.Blocks[bi].Addr(arg % n.Blocks[bi].Size())
				}
			}
		case 1: // an address twice in a record
			if len(h.IPs) > 0 {
				h.IPs = append(h.IPs, h.IPs[arg%len(h.IPs)])
			}
		case 2: // an address in two records
			if len(h.IPs) > 0 {
				o := &n.Handles[(arg/3)%len(n.Handles)]
				o.IPs = append(o.IPs, h.IPs[arg%len(h.IPs)])
			}
		case 3: // an owner dropped, its address free
			for ord := range b.Owners {
				delete(b.Owners, ord)
				b.Free = append(b.Free, ord)
				break
			}
		case 4: // a free address owned
			if len(b.Free) > 0 {
				i := arg % len(b.Free)
				if b.Owners == nil {
					b.Owners = map[int]string{}
				}
				b.Owners[b.Free[i]] = other
				b.Free = slices.Delete(b.Free, i, i+1)
			}
		case 5: // an owner changed
			for ord := range b.Owners {
				b.Owners[ord] = other
				break
			}
		case 6: // an address dropped from a record
			if len(h.IPs) > 0 {
				i := arg % len(h.IPs)
				h.IPs = slices.Delete(h.IPs, i, i+1)
			}
		case 7: // a record renamed
			h.ID = other
		case 8: // an address given another block
			if len(h.IPs) > 0 {
				h.IPs[arg%len(h.IPs)].Block = b.CIDR
			}
		case 9: // records reordered
			j := (arg / 3) % len(n.Handles)
			n.Handles[arg%len(n.Handles)], n.Handles[j] = n.Handles[j], n.Handles[arg%len(n.Handles)]
		}
	}
	return n
}

// checkValidate fails t unless Validate's fast way, when it decides,
// decides as the exact way, and Validate reports what the exact way does.
func checkValidate(t *testing.T, n Node) {
	t.Helper()
	decided, fast := n.validate(false)
	exactDecided, exact := n.validate(true)
	if !exactDecided {
		t.Fatal("the exact way did not decide")
	}
	if decided && errString(fast) != errString(exact) {
		t.Fatalf("fast way: %v\nexact way: %v", fast, exact)
	}
	if err := n.Validate(); errString(err) != errString(exact) {
		t.Fatalf("Validate: %v\nexact way: %v", err, exact)
	}
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

func TestValidateFastWay(t *testing.T) {
	cases := []struct {
		name string
		ops  []byte
	}{
		{"valid", nil},
		{"address moved", []byte{0, 7}},
		{"address twice in a record", []byte{1, 0}},
		{"address twice in a record, another moved", []byte{1, 0, 0, 9}},
		{"address twice in a record, another dropped", []byte{1, 0, 6, 2}},
		{"address in two records", []byte{2, 4}},
		{"owner dropped", []byte{3, 0}},
		{"owner dropped, IPv6", []byte{3, 1}},
		{"free address owned", []byte{4, 6}},
		{"owner changed", []byte{5, 3}},
		{"address dropped", []byte{6, 1}},
		{"record renamed", []byte{7, 4}},
		{"address in another block", []byte{8, 1}},
		{"records reordered", []byte{9, 4}},
		{"owner changed, records reordered", []byte{5, 3, 9, 4}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			checkValidate(t, mutateNode(codecNode(t, 6), c.ops))
		})
	}
	// The fast way decides on valid nodes, or it is no faster.
	if decided, err := codecNode(t, 110).validate(false); !decided || err != nil {
		t.Fatalf("fast way on a valid node: decided %v, %v", decided, err)
	}
}

// FuzzValidate checks Validate's fast way against its exact way on nodes
// the fuzzer corrupts.
func FuzzValidate(f *testing.F) {
	f.Add([]byte{}, 6)
	f.Add([]byte{1, 0, 0, 9}, 6)
	f.Add([]byte{2, 4, 3, 1}, 70)
	f.Add([]byte{5, 3, 9, 4, 6, 1}, 3)
	f.Fuzz(func(t *testing.T, ops []byte, pods int) {
		if pods < 0 || pods > 150 || len(ops) > 64 {
			return
		}
		checkValidate(t, mutateNode(codecNode(t, pods), ops))
	})
}

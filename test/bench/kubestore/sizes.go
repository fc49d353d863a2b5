package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
)

// sizeCase is one object whose sizes are printed.
type sizeCase struct {
	what string
	res  string
	name string
	spec any
}

func fullBlock(cidr netip.Prefix) blockSpec {
	b := newBlock(cidr, "size-node-0001")
	for b.assign(newOwner("size-node-0001")) {
	}
	return b
}

// node110 is one node's object with 110 dual-stack pods: two /26 and two
// /122 blocks, 110 handle records.
func node110(node string, i int) nodeSpec {
	s := nodeSpec{Node: node, Blocks: map[string]nodeBlock{}, Handles: map[string]handleRec{}}
	s.addNode("", node, i, 2)
	for range 110 {
		s.assignDual("", newOwner(node))
	}
	return s
}

// sizes creates each case's object and prints the JSON bytes of its spec,
// of the object as a GET returns it, and of its managedFields.
func sizes(ctx context.Context, k *kubeStore) error {
	v4 := netip.MustParsePrefix("10.250.0.0/26")
	v6 := netip.MustParsePrefix("fd00:22::40/122")
	cases := []sizeCase{
		{"full /26 block, 64 owner records (owners map atomic)", resBlock, "size-" + objName(v4), fullBlock(v4)},
		{"full /26 block, 64 owner records (owners map granular)", resBlockGran, "size-" + objName(v4), fullBlock(v4)},
		{"full /122 block, 64 owner records (owners map atomic)", resBlock, "size-" + objName(v6), fullBlock(v6)},
		{"node object: 110 dual-stack pods, 2x/26 + 2x/122 blocks", resNode, "size-node-0001", node110("size-node-0001", 900)},
	}
	fmt.Printf("%-58s %10s %12s %14s  %s\n", "object", "spec B", "stored B", "managedFields", "name")
	for _, c := range cases {
		spec, _ := json.Marshal(c.spec)
		if _, err := k.create(ctx, c.res, c.name, map[string]string{"ipkeeper.io/node": "size-node-0001"}, c.spec); err != nil {
			return fmt.Errorf("create %s %s: %w", c.res, c.name, err)
		}
		raw, err := k.rc.Get().Resource(c.res).Name(c.name).Do(ctx).Raw()
		if err != nil {
			return err
		}
		var o struct {
			Metadata struct {
				ManagedFields json.RawMessage `json:"managedFields"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(raw, &o); err != nil {
			return err
		}
		fmt.Printf("%-58s %10d %12d %14d  %s\n", c.what, len(spec), len(raw), len(o.Metadata.ManagedFields), c.name)
	}
	return nil
}

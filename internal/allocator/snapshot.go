package allocator

import (
	"cmp"
	"context"
	"slices"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

// Snapshot is what one reconcile pass of ipkeeper-controller reads of
// the store: every claim, then every node object, then every pool, each
// list read once. Nothing in it is read per node.
type Snapshot struct {
	// Pools are every pool, sorted by name.
	Pools []ipam.Pool
	// Handles are every handle assembled from its records, as
	// ObserveHandles returns them (sorted by node then ID).
	Handles []Observed
	// Blocks are the blocks held in the object of the node their claim
	// names, sorted by pool then CIDR: what Blocks(ctx, "") returns.
	Blocks []ipam.Block
	// Affine counts the claims of each node, as AffineNodes does.
	Affine map[string]int
	// Orphans are, by node, the claims whose block that node's object
	// does not hold: what an ADD killed after its claim and before its
	// object's write leaves (AdoptClaims takes them in), or an ADD
	// between those two writes at the time of the read.
	Orphans map[string][]store.BlockRef
}

// Observe reads the store for a reconcile pass in three lists:
// claims, node objects, pools. The claims are read first, so that a claim
// whose node's write lands between the two reads is not taken for an
// orphan. An object that cannot be decoded fails the whole read
// (ErrCorrupt), as in ObserveHandles.
func (a *Allocator) Observe(ctx context.Context) (Snapshot, error) {
	claims, err := a.store.ListClaims(ctx, store.ClaimSelector{})
	if err != nil {
		return Snapshot{}, storeErr(err)
	}
	nodes, err := a.store.ListNodes(ctx, store.NodeSelector{})
	if err != nil {
		return Snapshot{}, storeErr(err)
	}
	pools, err := a.Pools(ctx)
	if err != nil {
		return Snapshot{}, err
	}
	// The handles are assembled by ObserveHandles itself, from the list
	// just read instead of a second one.
	handles, err := New(listedNodes{Store: a.store, nodes: nodes}, a.log).ObserveHandles(ctx)
	if err != nil {
		return Snapshot{}, err
	}
	byName := make(map[string]store.Node, len(nodes))
	for _, n := range nodes {
		byName[n.Name] = n
		// Remembered, so that ReleaseObservedAll writes without a read.
		a.known.Store(n.Name, n)
	}
	snap := Snapshot{Pools: pools, Handles: handles, Affine: map[string]int{}, Orphans: map[string][]store.BlockRef{}}
	for _, c := range claims {
		snap.Affine[c.Node]++
		if b, held := byName[c.Node].Block(c.BlockRef); held {
			snap.Blocks = append(snap.Blocks, b)
		} else {
			snap.Orphans[c.Node] = append(snap.Orphans[c.Node], c.BlockRef)
		}
	}
	slices.SortFunc(snap.Blocks, func(x, y ipam.Block) int {
		if c := cmp.Compare(x.Pool, y.Pool); c != 0 {
			return c
		}
		return x.CIDR.Addr().Compare(y.CIDR.Addr())
	})
	return snap, nil
}

// listedNodes is a store whose list of every node object is one already
// read; everything else goes to the store.
type listedNodes struct {
	store.Store
	nodes []store.Node
}

func (l listedNodes) ListNodes(ctx context.Context, sel store.NodeSelector) ([]store.Node, error) {
	if sel == (store.NodeSelector{}) {
		return l.nodes, nil
	}
	return l.Store.ListNodes(ctx, sel)
}

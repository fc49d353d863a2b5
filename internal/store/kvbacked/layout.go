package kvbacked

import (
	"bytes"
	"context"
	"fmt"
	"strings"

	"github.com/ipkeeper/ipkeeper/internal/kv"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

// The meta keys: the layout marker and the highest version the migration's
// conversion read (package migrate writes both, in one transaction).
// MarkerValue marks this layout (node objects in parts under
// nodes/<node>/); WholeNodesMarkerValue marks the layout before it, which
// kept each node object whole under nodes/<node> and which package
// migrate splits into parts.
const (
	MarkerKey             = metaPrefix + "layout"
	MarkerValue           = "3"
	WholeNodesMarkerValue = "2"
	ConvertedKey          = metaPrefix + "converted"
)

// Layout says which layout a kv.Store holds.
type Layout int

const (
	// LayoutUnmarked: no layout marker. The store is empty, holds the
	// first layout, a conversion the migration did not finish, or objects
	// written before any marker; package migrate sorts it out.
	LayoutUnmarked Layout = iota
	// LayoutTyped: the migration has run to its marker; the typed objects
	// are the truth.
	LayoutTyped
	// LayoutWholeNodes: the typed objects of the layout before this one,
	// each node object whole under nodes/<node>; package migrate splits
	// them into parts before anything uses the store.
	LayoutWholeNodes
)

// ReadLayout tells a store's layout by one read of its marker key (one
// Get: one round trip on etcd, a read transaction on the local file).
func ReadLayout(ctx context.Context, s kv.Store) (Layout, error) {
	l, _, err := ReadLayoutWarm(ctx, s, Warm{})
	return l, err
}

// layoutOf tells the layout by the marker key as read.
func layoutOf(e kv.KeyValue) (Layout, error) {
	switch v := string(e.Value); {
	case e.Version == 0:
		return LayoutUnmarked, nil
	case v == MarkerValue:
		return LayoutTyped, nil
	case v == WholeNodesMarkerValue:
		return LayoutWholeNodes, nil
	default:
		return LayoutUnmarked, fmt.Errorf("%w: %s holds %q, a layout this version does not know (a newer ipkeeper wrote it?)", store.ErrCorrupt, MarkerKey, v)
	}
}

// PoolKey is the key of pool name's object (for package migrate).
func PoolKey(name string) string { return poolKey(name) }

// The keys of node objects, for package migrate: NodesPrefix holds them
// all; WholeNodeKey is where the layout before this one kept node object
// name whole; NodePartsPrefix holds its parts, NodeHeadKey its head.
const NodesPrefix = nodePrefix

func WholeNodeKey(name string) string    { return nodeKey(name) }
func NodePartsPrefix(name string) string { return nodePartsPrefix(name) }
func NodeHeadKey(name string) string     { return headKey(name) }

// MovedNodeValue is what a node's whole key (WholeNodeKey) holds once
// package migrate has split the object into parts: a value the layout
// before this one cannot decode (store.UnmarshalNode refuses it), so that
// a process of that version fails to read the node, and, the key being
// taken, to create it again. ListNodes passes over such keys; the
// migration deletes them once the store is marked with MarkerValue.
var MovedNodeValue = []byte(`"moved: this node object is kept in parts under nodes/<node>/"`)

// IsMovedNode reports whether e is a node's whole key holding
// MovedNodeValue.
func IsMovedNode(e kv.KeyValue) bool {
	rest, ok := strings.CutPrefix(e.Key, nodePrefix)
	return ok && rest != "" && !strings.Contains(rest, "/") && bytes.Equal(e.Value, MovedNodeValue)
}

// ObjectKeys returns the keys and values that hold nodes and claims: each
// node object's parts with the lends entries of its borrowers and the
// index entries of its records' sticky identities, each claim
// with its index key. Package migrate writes a converted store's objects
// with it.
func ObjectKeys(nodes []store.Node, claims []store.Claim) (map[string][]byte, error) {
	out := map[string][]byte{}
	for _, n := range nodes {
		n.Version = ""
		_, ops, err := (&Store{}).nodeWrite(context.Background(), n, true)
		if err != nil {
			return nil, fmt.Errorf("node object %q: %w", n.Name, err)
		}
		for _, op := range ops {
			out[op.Key] = op.Value
		}
	}
	for _, c := range claims {
		out[claimKey(c.BlockRef)] = claimValue(c)
		out[nodeClaimKey(c.Node, c.BlockRef)] = claimValue(c)
	}
	return out, nil
}

// IsObjectKey reports whether key is one ObjectKeys returns the like of: a
// node object's, a claim's, a claim index's, a lends entry's or a sticky
// index entry's.
func IsObjectKey(key string) bool {
	for _, p := range []string{claimPrefix, nodeClaimPrefix, nodePrefix, lendsPrefix, stickyPrefix} {
		if strings.HasPrefix(key, p) {
			return true
		}
	}
	return false
}

// MapErr maps a backend's error of the operation what to the store's
// errors (store.ErrCorrupt, ErrInvalid, ErrTooLarge, ErrDenied, each
// wrapping the backend's error too) and gives every error what as
// context.
func MapErr(what string, err error) error { return mapErr(what, err) }

package kvbacked

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/ipkeeper/ipkeeper/internal/kv"
	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/store/etcd"
)

// What a mirror of the typed objects (the web UI's address map) needs
// beyond store.Store, on the two kv backends: a cheap "did anything
// change" (Revision), a listing of the node objects that decodes only
// those the caller does not have at their version (ScanNodes), and, on
// etcd, the stream of changes (Watch).

// ErrNoWatch means the kv.Store under the typed store cannot stream its
// changes (the local file): poll it instead.
var ErrNoWatch = errors.New("kvbacked: this datastore cannot be watched")

// revisioner is a kv.Store that tells its revision cheaply (local, etcd).
type revisioner interface {
	Revision(ctx context.Context) (int64, error)
}

// kvWatcher is a kv.Store that streams its changes (etcd).
type kvWatcher interface {
	Watch(ctx context.Context, prefix string, after int64, fn func(rev int64, evs []etcd.Event)) error
}

// Revision returns the revision of the kv.Store the objects are kept in:
// it moves with every write to any object (and with writes to keys of
// other layouts), so an unchanged revision means no object changed. It
// fails with errors.ErrUnsupported when the kv.Store cannot tell.
func (s *Store) Revision(ctx context.Context) (int64, error) {
	r, ok := s.kv.(revisioner)
	if !ok {
		return 0, fmt.Errorf("kvbacked: revision: %w", errors.ErrUnsupported)
	}
	rev, err := r.Revision(ctx)
	return rev, mapErr("read the datastore's revision", err)
}

// VersionRevision returns the kv revision a Version of this store stands
// for, to order an object's state against a Watch event's Rev; ok is false
// for a Version this store does not hand out ("" included).
func VersionRevision(v store.Version) (rev int64, ok bool) { return parseVersion(v) }

// ScannedNode is one node object as ScanNodes listed it.
type ScannedNode struct {
	// Name and Version are the object's.
	Name    string
	Version store.Version
	// Node is the decoded object when Decoded (Version set).
	Node    store.Node
	Decoded bool
	// Err is set instead when the object was to be decoded and is corrupt
	// (wrapping store.ErrCorrupt); the listing goes on.
	Err error
}

// ScanNodes lists every node object with its version, decoding only those
// for which decode(name, version) is true (the others are listed by name
// and version alone), so a mirror re-reads only what changed. A corrupt
// object is reported in its entry, not as the listing's error. Sorted by
// name.
func (s *Store) ScanNodes(ctx context.Context, decode func(name string, v store.Version) bool) ([]ScannedNode, error) {
	nodes, err := s.ListNodes(ctx, store.NodeSelector{})
	if err != nil {
		return nil, err
	}
	out := make([]ScannedNode, 0, len(nodes))
	for _, n := range nodes {
		out = append(out, ScannedNode{Name: n.Name, Version: n.Version, Node: n, Decoded: decode(n.Name, n.Version)})
	}
	return out, nil
}

// Kind is the kind of object an Event is about.
type Kind int

// The kinds of objects Watch reports.
const (
	KindPool Kind = iota + 1
	KindClaim
	KindNode
)

// Event is one change of a typed object reported by Watch.
type Event struct {
	// Kind says which of Pool, Claim and Node is set.
	Kind Kind
	// Rev is the revision of the change: the Version of the new state
	// (VersionRevision), or the revision of the deletion.
	Rev int64
	// Deleted is set when the object was deleted: only its name (Pool's
	// Spec.Name, Claim's BlockRef, Node's Name) is set.
	Deleted bool
	// Pool, Claim and Node are the object's new state.
	Pool  store.Pool
	Claim store.Claim
	Node  store.Node
	// Err is set when the new state cannot be decoded (wrapping
	// store.ErrCorrupt); the object's name is set as for a deletion, and
	// its Version.
	Err error
}

// Watchable reports whether Watch can stream the kv.Store's changes.
func (s *Store) Watchable() bool {
	_, ok := s.kv.(kvWatcher)
	return ok
}

// Watch reports the changes of pools, claims and node objects made after
// revision after: fn is called with the events of each batch in revision
// order and the revision the batch was sent at. Index keys, lends keys
// and keys of other layouts are left out (a batch holding only those is
// not reported). It returns when ctx ends (with ctx's error), when the
// stream breaks (wrapping store.ErrUnavailable) or when after was
// compacted away (etcd.ErrWatchCompacted): re-read, then watch from the
// revision read before. It fails with ErrNoWatch on a kv.Store that does
// not stream (Watchable). fn runs on Watch's goroutine.
func (s *Store) Watch(ctx context.Context, after int64, fn func(rev int64, evs []Event)) error {
	w, ok := s.kv.(kvWatcher)
	if !ok {
		return ErrNoWatch
	}
	err := w.Watch(ctx, "", after, func(rev int64, kevs []etcd.Event) {
		evs := make([]Event, 0, len(kevs))
		nodes := map[string]bool{}
		for _, ke := range kevs {
			if name, ok := nodeOfPart(ke.Key); ok {
				if !nodes[name] {
					// Where the node first changed in the batch.
					nodes[name] = true
					evs = append(evs, s.nodeEvent(ctx, name, ke.Version))
				}
				continue
			}
			if ev, ok := typedEvent(ke); ok {
				evs = append(evs, ev)
			}
		}
		if len(evs) > 0 {
			fn(rev, evs)
		}
	})
	return err
}

// nodeOfPart returns the node a key of a node object's part belongs to.
func nodeOfPart(key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, nodePrefix)
	if !ok {
		return "", false
	}
	name, _, ok := strings.Cut(rest, "/")
	return name, ok && name != ""
}

// nodeEvent is the event of node object name, changed at revision rev: a
// node object is kept in parts, so its new state is read whole (at least
// as new as rev; the mirror keeps the newest it saw).
func (s *Store) nodeEvent(ctx context.Context, name string, rev int64) Event {
	n, err := s.GetNode(ctx, name)
	ev := Event{Kind: KindNode, Rev: rev, Node: n}
	switch {
	case errors.Is(err, store.ErrNotFound):
		ev.Deleted, ev.Node = true, store.Node{Name: name}
	case err != nil:
		ev.Err, ev.Node = err, store.Node{Name: name, Version: version(rev)}
	default:
		if v, ok := parseVersion(n.Version); ok {
			ev.Rev = v
		}
	}
	return ev
}

// typedEvent turns a change of one key into the event of its object; ok
// is false for keys that are no pool, claim or node object.
func typedEvent(ke etcd.Event) (Event, bool) {
	ev := Event{Rev: ke.Version, Deleted: ke.Delete}
	e := kv.KeyValue{Key: ke.Key, Value: ke.Value, Version: ke.Version}
	switch {
	case strings.HasPrefix(ke.Key, poolPrefix):
		ev.Kind = KindPool
		name := strings.TrimPrefix(ke.Key, poolPrefix)
		if !ke.Delete {
			ev.Pool, ev.Err = decodePool(e)
		}
		ev.Pool.Spec.Name = name
	case strings.HasPrefix(ke.Key, claimPrefix):
		ev.Kind = KindClaim
		ref, ok := claimRefOf(ke.Key)
		if !ok {
			return Event{}, false
		}
		if !ke.Delete {
			ev.Claim, ev.Err = decodeClaim(e, "")
		}
		ev.Claim.BlockRef = ref
	default:
		return Event{}, false
	}
	if ev.Err != nil {
		// The name is set as for a deletion; the Version says which
		// state could not be read.
		ev.Pool.Version, ev.Claim.Version, ev.Node.Version = version(ke.Version), version(ke.Version), version(ke.Version)
	}
	return ev, true
}

// claimRefOf reads the block a claims/<pool>/<block> key names.
func claimRefOf(key string) (store.BlockRef, bool) {
	pool, blk, ok := strings.Cut(strings.TrimPrefix(key, claimPrefix), "/")
	if !ok {
		return store.BlockRef{}, false
	}
	i := strings.LastIndexByte(blk, '-')
	if i < 0 {
		return store.BlockRef{}, false
	}
	cidr, err := netip.ParsePrefix(blk[:i] + "/" + blk[i+1:])
	if err != nil || blockName(cidr) != blk {
		return store.BlockRef{}, false
	}
	return store.BlockRef{Pool: pool, CIDR: cidr}, true
}

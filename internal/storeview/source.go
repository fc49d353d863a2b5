// Package storeview keeps a view of the typed datastore's pools, claims
// and node objects in memory, fed by what the datastore reports: one list,
// then a watch from the revision the list was read at. A watch that breaks
// is resumed from the view's revision; the view lists again only when that
// revision is no longer available (etcd compacted it away) or the source
// cannot tell when a resumed watch has caught up. The controller's passes
// and the address map read the view instead of listing the datastore.
//
// A backend offers its list and watch through Source. On etcd
// (kvbacked.Follower) the watch streams the keys of node objects' parts,
// which the source applies in revision order before it reports the node
// object whole. On the Kubernetes API (kube.Watcher) it LISTs the CRDs at
// one resourceVersion and WATCHes each with bookmarks; a broken WATCH
// resumes from the resourceVersions the view holds (a Resumer), and 410
// Gone is ErrExpired. The local file cannot be watched: it is followed by
// a polled view (NewPolled), which Refresh lists again, once per pass of
// the controller.
//
// A view that has not listed, or whose watch failed and has neither
// listed again nor caught up by a resumed watch since, is not synced
// (Synced false): it must not be taken for the datastore's state, and the
// controller releases nothing on it.
package storeview

import (
	"context"
	"errors"

	"github.com/ipkeeper/ipkeeper/internal/store"
)

// Revision is a source's position in the datastore's history: what List
// was read at and what each Batch brings the view to, and where Watch
// resumes. It is opaque to the view (etcd: a revision in decimal).
type Revision string

// ErrExpired is wrapped by a Watch that cannot start from the revision it
// was given (etcd compacted it away; the API server's 410 Gone): the view
// lists again.
var ErrExpired = errors.New("storeview: the revision to watch from is no longer available")

// ErrNoWatch is Watch's error on a source that cannot stream its changes:
// follow it with a polled view.
var ErrNoWatch = errors.New("storeview: this datastore cannot be watched")

// ErrNotSynced means the view does not hold the datastore's state: it has
// not listed yet, or its watch failed and it has not listed again.
var ErrNotSynced = errors.New("storeview: the view of the datastore is not synced")

// Source is a datastore a View follows.
type Source interface {
	// List reads every pool, claim and node object, all as of one
	// revision (State.Rev). An object that cannot be decoded is reported
	// in State.Bad, not as List's error.
	List(ctx context.Context) (State, error)
	// Watch calls fn with the changes made after revision from, batch by
	// batch in revision order, until ctx ends or the stream fails; it
	// never returns nil. An error wrapping ErrExpired means from is no
	// longer available; ErrNoWatch that the source cannot stream. fn
	// runs on Watch's goroutine, which waits for it.
	Watch(ctx context.Context, from Revision, fn func(Batch)) error
}

// State is every object of the datastore as one List read it.
type State struct {
	Rev    Revision
	Pools  []store.Pool
	Claims []store.Claim
	Nodes  []store.Node
	// Bad are the objects that could not be decoded: Events with Err
	// set.
	Bad []Event
}

// Kind is the kind of object an Event is about.
type Kind int

// The kinds of objects.
const (
	KindPool Kind = iota + 1
	KindClaim
	KindNode
)

// Event is the new state of one object.
type Event struct {
	// Kind says which of Pool, Claim and Node is set.
	Kind Kind
	// Deleted is set when the object is gone: only its name is set
	// (Pool's Spec.Name, Claim's BlockRef, Node's Name).
	Deleted bool
	Pool    store.Pool
	Claim   store.Claim
	Node    store.Node
	// Err is set when the object cannot be decoded (wrapping
	// store.ErrCorrupt); its name and Version are set.
	Err error
}

// Batch is what one step of a watch changed; without Events it only
// moves the revision (a bookmark).
type Batch struct {
	Rev    Revision
	Events []Event
	// Current says that every change up to Rev has been reported (etcd's
	// answer to a progress request).
	Current bool
}

// Progresser is a Source whose running watch can be asked to report a
// Batch with Current set once it has reported every change made up to
// now (etcd's progress requests; the source may drop a request while its
// watch catches up, so ask again). A view of such a source resumes a
// broken watch from its revision instead of listing again, and can be
// brought up to date with the datastore (Sync).
type Progresser interface {
	RequestProgress()
}

// key names the object of e: "pool <name>", "claim <pool>/<cidr>" or
// "node <name>".
func (e Event) key() string {
	switch e.Kind {
	case KindPool:
		return "pool " + e.Pool.Spec.Name
	case KindClaim:
		return "claim " + e.Claim.BlockRef.String()
	default:
		return "node " + e.Node.Name
	}
}

// What names the object of e as the map shows it.
func (e Event) What() string { return e.key() }

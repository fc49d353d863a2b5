package datastore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/filetrust"
	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/store/kvbacked"
)

// A plugin process on etcd leaves its node object, as it last read or
// wrote it, in a hint file beside its node lock, for the next process of
// the node: that one then does not read the object (often the largest
// thing an ADD moves: ~0.3 KB per pod on the node) and writes its change
// as a compare-and-swap at the hinted version (kvbacked.NodeHint). The
// file also names the node's claims the process read or made, so that the
// next one's claim guard (internal/allocator) needs no list of them. The
// file is read and written under the node lock only. A lost, torn, stale
// or foreign hint costs a read or a conflict, never another node's
// addresses: the hint is taken only from a store with the identity it
// names and only as the base of a compare-and-swap, whose transaction
// also requires every claim the hint names to be the node's, so a hint
// naming another node's block costs a conflict. What the node object
// holds at the hinted version is not compared: a hint forged by root on
// the node into a false state of the node's own blocks can make its next
// ADD give a pod an address another pod of the same node holds — which
// root on the node can do anyway, with the node's credentials or in a
// pod's network namespace (docs/STORAGE.md, "What a node can break").
//
// Not on the local file (reading it there costs what decoding the hint
// costs) nor the Kubernetes API (its node agent keeps the object in
// memory).

// hintFileVersion is the first line's format tag.
const hintFileVersion = 4

// maxHintFileBytes bounds what is read: a node object's limit and room for
// the header line.
const maxHintFileBytes = 3<<19 + 4<<10

// hintHeader is the hint file's first line; the node object's stored
// bytes follow it.
type hintHeader struct {
	Format  int           `json:"format"`
	Store   string        `json:"store"`
	StoreAt store.Version `json:"storeAt"`
	Layout  store.Version `json:"layout"`
	Node    string        `json:"node"`
	Version store.Version `json:"version"`
	Pools   []hintPool    `json:"pools,omitempty"`
	Claims  []hintClaim   `json:"claims,omitempty"`
}

// hintClaim is a claim of the node in the hint file's first line.
type hintClaim struct {
	Pool    string        `json:"pool"`
	CIDR    netip.Prefix  `json:"cidr"`
	Version store.Version `json:"version"`
}

// hintPool is a pool in the hint file's first line (a pool's stored form
// is JSON).
type hintPool struct {
	Name    string          `json:"name"`
	Version store.Version   `json:"version"`
	Value   json.RawMessage `json:"value"`
	// Reserved is the pool's reservations as stored (absent: none).
	Reserved json.RawMessage `json:"reserved,omitempty"`
}

// hintPath is node's hint file for the datastore whose node lock file is
// lock, in dir.
func hintPath(dir, lock, node string) string {
	sum := sha256.Sum256([]byte(node))
	return filepath.Join(dir, strings.TrimSuffix(lock, ".lock")+"-"+hex.EncodeToString(sum[:8])+".hint")
}

// loadHint reads the hint file at path; nil when there is none usable
// (missing, not a private regular file, too large, malformed, or of
// another node).
func loadHint(path, node string) *kvbacked.NodeHint {
	f, err := filetrust.OpenPrivateFile("hint file", path, os.O_RDONLY)
	if err != nil {
		return nil
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxHintFileBytes+1))
	if err != nil || len(b) > maxHintFileBytes {
		return nil
	}
	line, value, ok := bytes.Cut(b, []byte{'\n'})
	var h hintHeader
	if !ok || json.Unmarshal(line, &h) != nil || h.Format != hintFileVersion || h.Node != node || len(value) == 0 {
		return nil
	}
	out := &kvbacked.NodeHint{Store: h.Store, StoreAt: h.StoreAt, Layout: h.Layout, Node: h.Node, Version: h.Version, Value: value}
	for _, p := range h.Pools {
		out.Pools = append(out.Pools, kvbacked.PoolHint{Name: p.Name, Version: p.Version, Value: p.Value, Reserved: p.Reserved})
	}
	for _, c := range h.Claims {
		out.Claims = append(out.Claims, kvbacked.ClaimHint{Ref: store.BlockRef{Pool: c.Pool, CIDR: c.CIDR}, Version: c.Version})
	}
	return out
}

// saveHint replaces the hint file at path by h: it writes a temporary
// file, removes the old hint and renames the temporary file into its
// place, so that a reader under the lock sees a whole hint or none (a
// process killed in between leaves none: the next one reads the store).
// The old file is removed first because a rename over an existing file
// makes ext4 (auto_da_alloc) write the new file's data out before the
// rename returns: milliseconds, under the node lock, on every plugin call
// whose lock directory is on ext4 rather than tmpfs. Failures leave no
// hint: it is only a hint.
func saveHint(path string, h kvbacked.NodeHint) {
	head := hintHeader{Format: hintFileVersion, Store: h.Store, StoreAt: h.StoreAt, Layout: h.Layout, Node: h.Node, Version: h.Version}
	for _, p := range h.Pools {
		if json.Valid(p.Value) && (p.Reserved == nil || json.Valid(p.Reserved)) {
			head.Pools = append(head.Pools, hintPool{Name: p.Name, Version: p.Version, Value: p.Value, Reserved: p.Reserved})
		}
	}
	for _, c := range h.Claims {
		head.Claims = append(head.Claims, hintClaim{Pool: c.Ref.Pool, CIDR: c.Ref.CIDR, Version: c.Version})
	}
	line, err := json.Marshal(head)
	if err != nil || len(line)+1+len(h.Value) > maxHintFileBytes {
		removeHint(path)
		return
	}
	tmp := path + ".tmp"
	f, err := filetrust.OpenPrivateFile("hint file", tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC)
	if err != nil {
		removeHint(path)
		return
	}
	_, werr := f.Write(append(append(line, '\n'), h.Value...))
	cerr := f.Close()
	if werr == nil && cerr == nil {
		removeHint(path)
	}
	if werr != nil || cerr != nil || os.Rename(tmp, path) != nil {
		_ = os.Remove(tmp)
		removeHint(path)
	}
}

// removeHint deletes the hint file at path, if any.
func removeHint(path string) { _ = os.Remove(path) }

// storeIDTimeout bounds giving a store its identity when a plugin closes
// (once in the store's life).
const storeIDTimeout = 2 * time.Second

// hintFile is the hint file of a plugin's open on etcd (locked.Close
// saves it before the node lock is released).
type hintFile struct {
	s    *kvbacked.Store
	path string
	// id and at are the store's identity and its key's version, as the
	// open found them ("" when it has none yet).
	id string
	at store.Version
}

// save leaves the node object and pools the store last read or wrote in
// the hint file, or removes the file when there is nothing to leave.
func (h *hintFile) save() {
	hint, ok := h.s.Tracked()
	if ok {
		id, at := h.id, h.at
		if hint.Wrote && (id == "" || hint.Layout == "") {
			// Once in a store's life (its identity), or after the open
			// that marked or migrated it (the marker's version).
			ctx, cancel := context.WithTimeout(context.Background(), storeIDTimeout)
			if id == "" {
				id, at, _ = kvbacked.EnsureStoreID(ctx, h.s.KV())
			}
			if hint.Layout == "" {
				hint.Layout, _ = kvbacked.LayoutVersion(ctx, h.s.KV())
			}
			cancel()
		}
		hint.Store, hint.StoreAt = id, at
		ok = id != "" && hint.Layout != ""
	}
	if ok {
		saveHint(h.path, hint)
	} else {
		removeHint(h.path)
	}
}

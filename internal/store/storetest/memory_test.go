package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/store"
)

// memory is a plain in-memory store.Store, only to test the suite itself:
// that it passes on a store keeping the contract, and fails on each of
// the defects a backend could have (the flaws below).
type memory struct {
	mu     sync.Mutex
	rev    int
	pools  map[string]memObj
	claims map[store.BlockRef]memObj
	nodes  map[string]memObj
	res    map[store.BlockRef]store.Reservation
	flaws  flaws
}

type memObj struct {
	data []byte
	rev  int
}

// flaws are contract violations the suite must catch.
type flaws struct {
	ignoreVersion   bool // updates and deletes ignore the version
	claimOverwrites bool // CreateClaim replaces an existing claim
	lendsToPrefix   bool // LendsTo selects by name prefix, not exactly
	reuseVersions   bool // versions restart per object
	noLimit         bool // no size limit
	writesTooLarge  bool // a node object over the limit is stored, then refused
	keepsInvalid    bool // stores nodes without validating them
	noOpKeepsVer    bool // an unchanged write keeps the version (as a bare Kubernetes PUT does)
}

func newMemory(f flaws) *memory {
	return &memory{pools: map[string]memObj{}, claims: map[store.BlockRef]memObj{}, nodes: map[string]memObj{}, res: map[store.BlockRef]store.Reservation{}, flaws: f}
}

func (m *memory) next(old memObj) int {
	if m.flaws.reuseVersions {
		return old.rev + 1
	}
	m.rev++
	return m.rev
}

func ver(r int) store.Version { return store.Version(strconv.Itoa(r)) }

// write is create (v == "") or compare-and-swap of one object in objs.
func write[K comparable](m *memory, ctx context.Context, objs map[K]memObj, k K, v store.Version, data []byte, create bool) (store.Version, error) {
	if err := ctx.Err(); err != nil {
		return "", fmt.Errorf("%w: %w", store.ErrUnavailable, err)
	}
	old, ok := objs[k]
	switch {
	case create && ok && !(m.flaws.claimOverwrites && fmt.Sprintf("%T", k) == "store.BlockRef"):
		return "", fmt.Errorf("%v: %w", k, store.ErrExists)
	case !create && !ok:
		return "", fmt.Errorf("%v: %w", k, store.ErrNotFound)
	case !create && ver(old.rev) != v && !m.flaws.ignoreVersion:
		return "", fmt.Errorf("%v: %w", k, store.ErrConflict)
	}
	if !create && m.flaws.noOpKeepsVer && string(old.data) == string(data) {
		return ver(old.rev), nil
	}
	if create {
		old = memObj{}
	}
	o := memObj{data: data, rev: m.next(old)}
	objs[k] = o
	return ver(o.rev), nil
}

func remove[K comparable](objs map[K]memObj, k K, v store.Version, ignore bool) error {
	old, ok := objs[k]
	switch {
	case !ok:
		return fmt.Errorf("%v: %w", k, store.ErrNotFound)
	case ver(old.rev) != v && !ignore:
		return fmt.Errorf("%v: %w", k, store.ErrConflict)
	}
	delete(objs, k)
	return nil
}

func (m *memory) GetPool(_ context.Context, name string) (store.Pool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	o, ok := m.pools[name]
	if !ok {
		return store.Pool{}, fmt.Errorf("pool %q: %w", name, store.ErrNotFound)
	}
	p, err := store.UnmarshalPool(name, o.data)
	p.Version = ver(o.rev)
	var rs []store.Reservation
	for _, r := range m.res {
		rs = append(rs, r)
	}
	p.Spec.Reserved = store.ReservedPrefixes(name, rs)
	return p, err
}

func (m *memory) ListPools(ctx context.Context) ([]store.Pool, error) {
	var out []store.Pool
	for _, name := range m.sortedPools() {
		p, err := m.GetPool(ctx, name)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

func (m *memory) sortedPools() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var names []string
	for n := range m.pools {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

func (m *memory) putPool(ctx context.Context, p store.Pool, create bool) (store.Pool, error) {
	data, err := store.MarshalPool(p)
	if err != nil {
		return store.Pool{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	p.Version, err = write(m, ctx, m.pools, p.Spec.Name, p.Version, data, create)
	return p, err
}

func (m *memory) CreatePool(ctx context.Context, p store.Pool) (store.Pool, error) {
	return m.putPool(ctx, p, true)
}

func (m *memory) UpdatePool(ctx context.Context, p store.Pool) (store.Pool, error) {
	return m.putPool(ctx, p, false)
}

func (m *memory) DeletePool(_ context.Context, p store.Pool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := remove(m.pools, p.Spec.Name, p.Version, m.flaws.ignoreVersion); err != nil {
		return err
	}
	for ref := range m.res {
		if ref.Pool == p.Spec.Name {
			delete(m.res, ref)
		}
	}
	return nil
}

func (m *memory) CreateReservation(_ context.Context, r store.Reservation) (store.Reservation, error) {
	spec, err := store.EncodeReservation(r)
	if err != nil {
		return store.Reservation{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	o, ok := m.pools[r.Pool]
	if !ok {
		return store.Reservation{}, fmt.Errorf("pool %q: %w", r.Pool, store.ErrNotFound)
	}
	p, _ := store.UnmarshalPool(r.Pool, o.data)
	if err := store.ReservationFits(p.Spec, r); err != nil {
		return store.Reservation{}, err
	}
	if _, ok := m.res[r.Ref()]; ok {
		return store.Reservation{}, fmt.Errorf("%s: %w", r.Ref(), store.ErrExists)
	}
	m.rev++
	r.Created, r.Version = spec.Created, ver(m.rev)
	m.res[r.Ref()] = r
	return r, nil
}

func (m *memory) ListReservations(_ context.Context, sel store.ReservationSelector) ([]store.Reservation, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []store.Reservation
	for _, r := range m.res {
		if sel.Pool == "" || r.Pool == sel.Pool {
			out = append(out, r)
		}
	}
	return store.SortReservations(out), nil
}

func (m *memory) DeleteReservation(_ context.Context, r store.Reservation) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	old, ok := m.res[r.Ref()]
	switch {
	case !ok:
		return fmt.Errorf("%s: %w", r.Ref(), store.ErrNotFound)
	case old.Version != r.Version:
		return fmt.Errorf("%s: %w", r.Ref(), store.ErrConflict)
	}
	delete(m.res, r.Ref())
	return nil
}

func (m *memory) CreateClaim(ctx context.Context, c store.Claim) (store.Claim, error) {
	spec, err := store.EncodeClaim(c)
	if err != nil {
		return store.Claim{}, err
	}
	data, _ := json.Marshal(spec)
	m.mu.Lock()
	defer m.mu.Unlock()
	c.Version, err = write(m, ctx, m.claims, c.BlockRef, "", data, true)
	return c, err
}

func (m *memory) GetClaim(_ context.Context, ref store.BlockRef) (store.Claim, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	o, ok := m.claims[ref]
	if !ok {
		return store.Claim{}, fmt.Errorf("claim %s: %w", ref, store.ErrNotFound)
	}
	var spec store.ClaimSpec
	if err := json.Unmarshal(o.data, &spec); err != nil {
		return store.Claim{}, err
	}
	c, err := store.DecodeClaim(ref, spec)
	c.Version = ver(o.rev)
	return c, err
}

func (m *memory) ListClaims(ctx context.Context, sel store.ClaimSelector) ([]store.Claim, error) {
	m.mu.Lock()
	refs := slices.Collect(func(yield func(store.BlockRef) bool) {
		for r := range m.claims {
			if !yield(r) {
				return
			}
		}
	})
	m.mu.Unlock()
	slices.SortFunc(refs, store.BlockRef.Compare)
	var out []store.Claim
	for _, r := range refs {
		c, err := m.GetClaim(ctx, r)
		if err != nil {
			return nil, err
		}
		if (sel.Node == "" || c.Node == sel.Node) && (sel.Pool == "" || c.Pool == sel.Pool) {
			out = append(out, c)
		}
	}
	return out, nil
}

func (m *memory) DeleteClaim(_ context.Context, c store.Claim) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return remove(m.claims, c.BlockRef, c.Version, m.flaws.ignoreVersion)
}

func (m *memory) GetNode(ctx context.Context, name string) (store.Node, error) {
	if err := ctx.Err(); err != nil {
		return store.Node{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	o, ok := m.nodes[name]
	if !ok {
		return store.Node{}, fmt.Errorf("node %q: %w", name, store.ErrNotFound)
	}
	n, err := store.UnmarshalNode(name, o.data)
	n.Version = ver(o.rev)
	return n, err
}

func (m *memory) putNode(ctx context.Context, n store.Node, create bool) (store.Node, error) {
	var data []byte
	var err error
	if m.flaws.keepsInvalid {
		spec := store.NodeSpec{}
		for _, b := range n.Blocks {
			spec.Blocks = append(spec.Blocks, store.BlockSpec{Pool: b.Pool, CIDR: b.CIDR, Free: store.FormatQueue(b.Free)})
		}
		data, err = json.Marshal(spec)
	} else {
		data, err = store.MarshalNode(n)
	}
	if err != nil {
		return store.Node{}, err
	}
	tooLarge := fmt.Errorf("%w: node object %q encodes to %d bytes", store.ErrTooLarge, n.Name, len(data))
	over := m.Limits().MaxNodeBytes > 0 && len(data) > m.Limits().MaxNodeBytes
	if over && !m.flaws.writesTooLarge {
		return store.Node{}, tooLarge
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	n.Version, err = write(m, ctx, m.nodes, n.Name, n.Version, data, create)
	if over && err == nil {
		return store.Node{}, tooLarge
	}
	return n, err
}

func (m *memory) CreateNode(ctx context.Context, n store.Node) (store.Node, error) {
	return m.putNode(ctx, n, true)
}

func (m *memory) UpdateNode(ctx context.Context, n store.Node) (store.Node, error) {
	return m.putNode(ctx, n, false)
}

func (m *memory) DeleteNode(_ context.Context, n store.Node) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return remove(m.nodes, n.Name, n.Version, m.flaws.ignoreVersion)
}

func (m *memory) ListNodes(ctx context.Context, sel store.NodeSelector) ([]store.Node, error) {
	m.mu.Lock()
	var names []string
	for n := range m.nodes {
		names = append(names, n)
	}
	m.mu.Unlock()
	slices.Sort(names)
	var out []store.Node
	for _, name := range names {
		n, err := m.GetNode(ctx, name)
		if err != nil {
			return nil, err
		}
		keep := sel.LendsTo == "" || slices.Contains(n.LendsTo(), sel.LendsTo)
		keep = keep && (sel.Sticky == "" || slices.Contains(n.StickyIDs(), sel.Sticky))
		if m.flaws.lendsToPrefix && sel.LendsTo != "" {
			keep = slices.ContainsFunc(n.LendsTo(), func(b string) bool { return len(b) >= 4 && b[:4] == sel.LendsTo[:min(4, len(sel.LendsTo))] })
		}
		if keep {
			out = append(out, n)
		}
	}
	return out, nil
}

func (m *memory) Limits() store.Limits {
	if m.flaws.noLimit {
		return store.Limits{}
	}
	return store.Limits{MaxObjectBytes: 1 << 20, MaxNodeBytes: 1 << 20}
}

func (m *memory) Close() error { return nil }

func TestSuiteOnMemory(t *testing.T) {
	Run(t, func(*testing.T) store.Store { return newMemory(flaws{}) })
}

// flawEnv names the flaw TestFlawedMemory runs the suite against; it is
// set only in the processes TestSuiteCatchesFlaws starts.
const flawEnv = "IPKEEPER_STORETEST_FLAW"

var flawsByName = map[string]flaws{
	"ignoreVersion":   {ignoreVersion: true},
	"claimOverwrites": {claimOverwrites: true},
	"lendsToPrefix":   {lendsToPrefix: true},
	"reuseVersions":   {reuseVersions: true},
	"noLimit":         {noLimit: true},
	"writesTooLarge":  {writesTooLarge: true},
	"keepsInvalid":    {keepsInvalid: true},
	"noOpKeepsVer":    {noOpKeepsVer: true},
}

// TestFlawedMemory is the child half of TestSuiteCatchesFlaws.
func TestFlawedMemory(t *testing.T) {
	name := os.Getenv(flawEnv)
	if name == "" {
		t.Skip("run by TestSuiteCatchesFlaws")
	}
	Run(t, func(*testing.T) store.Store { return newMemory(flawsByName[name]) })
}

// TestSuiteCatchesFlaws runs the suite on stores that each break one
// promise of the contract and expects it to fail, in the subtest that
// guards that promise.
func TestSuiteCatchesFlaws(t *testing.T) {
	want := map[string]string{
		"ignoreVersion":   "PoolLifecycle",
		"claimOverwrites": "ClaimCreateRace",
		"lendsToPrefix":   "ListNodesLendsTo",
		"reuseVersions":   "NodeVersionAfterRecreate",
		"noLimit":         "NodeTooLarge",
		"writesTooLarge":  "NodeTooLarge",
		"keepsInvalid":    "NodeInvalid",
		"noOpKeepsVer":    "NodeUnchangedUpdate",
	}
	for name, subtest := range want {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestFlawedMemory$", "-test.count=1")
			cmd.Env = append(os.Environ(), flawEnv+"="+name)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("the suite passed on a store with flaw %s:\n%s", name, out)
			}
			if !strings.Contains(string(out), "--- FAIL: TestFlawedMemory/"+subtest) {
				t.Fatalf("flaw %s: subtest %s did not fail:\n%s", name, subtest, out)
			}
		})
	}
}

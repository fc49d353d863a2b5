package webui

import (
	"cmp"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

// model mirrors the pools, block claims and node objects of the datastore
// and keeps per-block aggregates current as changes arrive, so that what a
// request needs is ready or a short walk over blocks away. Readers take
// mu.RLock. Objects arrive whole (a poll's snapshot, a watch event); a
// node object at a version the mirror already holds is not looked at
// again, and within a changed one only the blocks and handle records that
// differ are replaced.
type model struct {
	log *slog.Logger

	mu      sync.RWMutex
	rev     int64  // the store revision the mirror reflects
	gen     uint64 // bumped whenever anything shown changes
	loaded  bool   // the first full read arrived
	status  error  // the last failure to read the datastore, nil when fine
	updated time.Time
	changed chan struct{} // closed and replaced when gen moves
	pools   map[string]*poolState
	claims  map[store.BlockRef]*claimState
	nodes   map[string]*nodeState
	blocks  map[store.BlockRef]*blockState
	byPool  map[string]map[store.BlockRef]*blockState // pool name -> its blocks
	// handles holds every handle by ID, its records in every node object
	// merged (a dual-stack handle with a borrowed address has a record in
	// the lender's object too).
	handles  map[string]*handleState
	podCount map[string]int // node -> handles
	leaks    map[netip.Addr]LeakCandidate
	leakList []LeakCandidate   // as last reported, sorted
	bad      map[string]string // objects that cannot be read -> why
	strs     map[string]string // interned node names
	// forecasts are the pools' exhaustion forecasts; now is the clock
	// their samples are taken by.
	forecasts map[string]*poolForecast
	now       func() time.Time

	// idx is the handles' search index, built by the first search (under
	// idxMu, with mu held for reading) and again when idxAdded, the
	// handles put since (under mu), has grown large.
	idxMu       sync.Mutex
	idx         *handleIndex
	idxAdded    []*handleState
	idxBuilding bool // a goroutine is building the next idx
	// idxPending are the handles put since the goroutine building the
	// next idx took the handles (under mu, like idxAdded).
	idxPending []*handleState
}

type poolState struct {
	version store.Version
	pool    ipam.Pool
}

type claimState struct {
	version store.Version
	node    string
}

// nodeState is what the mirror keeps of a node object besides its blocks
// and handles: its version and what it holds, to undo it on a change.
type nodeState struct {
	version store.Version
	blocks  []store.BlockRef
	handles []string // IDs of the handles with a record in it
}

// blockState is a block the map shows: held in a node object (holder),
// or only claimed (holder "", no addresses in use).
type blockState struct {
	ref    store.BlockRef
	holder string
	b      ipam.Block // Owners only; Node is "" for store.UnaffineNode
	agg    blockAgg
}

// blockAgg is what the overview shows of a block.
type blockAgg struct {
	reserved int // addresses the pool does not permit
	inUse    int
	borrowed int // held by handles of a node other than the block's
	orphans  int // held by a handle ID that has no handle
	leaks    int // leak candidates among the block's addresses
	// borrowers counts, per node, the addresses its handles hold here when
	// that node is not the block's.
	borrowers map[string]int
}

// handleState is what the map keeps of a handle: the record it shows
// (shared with the node object it came from, never changed), and the
// addresses (to find the blocks a change touches). A handleState never
// changes once it is in the map, but for its record, which a node object
// read again moves to its equal record there (so that the old object can
// go; atomically: the search index is built without holding the mirror):
// a change puts a new one.
type handleState struct {
	id   string
	node string // the record's Node as the map names it (interned)
	// recp is the handle's last record put: its pod, container, network,
	// times and sticky identity (its IPs are that part's addresses only).
	recp  atomic.Pointer[ipam.Handle]
	ips   []ipam.HandleIP // every part's, in part order
	parts []handlePart    // by node object name
}

// rec returns the handle's record.
func (h *handleState) rec() *ipam.Handle { return h.recp.Load() }

// handlePart is a handle's record in one node object: its addresses there.
type handlePart struct {
	obj string
	ips []ipam.HandleIP
}

func newModel(log *slog.Logger) *model {
	return &model{
		log:      log,
		changed:  make(chan struct{}),
		pools:    map[string]*poolState{},
		claims:   map[store.BlockRef]*claimState{},
		nodes:    map[string]*nodeState{},
		blocks:   map[store.BlockRef]*blockState{},
		byPool:   map[string]map[store.BlockRef]*blockState{},
		handles:  map[string]*handleState{},
		podCount: map[string]int{},
		leaks:    map[netip.Addr]LeakCandidate{},
		bad:      map[string]string{},
		strs:     map[string]string{},

		forecasts: map[string]*poolForecast{},
		now:       time.Now,
	}
}

// bumpLocked moves gen and wakes the waiters. mu must be held for writing.
func (m *model) bumpLocked() {
	m.gen++
	m.updated = time.Now()
	close(m.changed)
	m.changed = make(chan struct{})
}

// wait returns the current generation and a channel closed when it moves.
func (m *model) wait() (uint64, <-chan struct{}) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.gen, m.changed
}

// setStatus records the outcome of the last read of the datastore.
func (m *model) setStatus(err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if (err == nil) == (m.status == nil) && (err == nil || err.Error() == m.status.Error()) {
		return
	}
	m.status = err
	m.bumpLocked()
}

// nodeVersions returns the version of every node object the mirror holds.
func (m *model) nodeVersions() map[string]store.Version {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := make(map[string]store.Version, len(m.nodes))
	for n, s := range m.nodes {
		out[n] = s.version
	}
	return out
}

// dirty collects what must be recomputed after changes.
type dirty struct {
	blocks map[store.BlockRef]bool
	pools  map[string]bool // every block of these pools
	n      int             // objects changed
}

func newDirty() *dirty {
	return &dirty{blocks: map[store.BlockRef]bool{}, pools: map[string]bool{}}
}

func (d *dirty) block(ref store.BlockRef) { d.blocks[ref] = true }

func (d *dirty) handle(h *handleState) {
	for _, ip := range h.ips {
		if ip.Block.IsValid() {
			d.block(store.BlockRef{Pool: ip.Pool, CIDR: ip.Block})
		}
	}
}

// finishLocked recomputes what d names and moves the generation when
// anything changed. rev is the revision read (0: the store has none; the
// shown revision then counts the reads that changed something).
func (m *model) finishLocked(rev int64, d *dirty, full bool) {
	for name := range d.pools {
		for ref := range m.byPool[name] {
			d.blocks[ref] = true
		}
	}
	for ref := range d.blocks {
		if b := m.blocks[ref]; b != nil {
			b.agg = m.aggregate(b.b)
		}
	}
	m.forecastLocked(d, m.now())
	if rev == 0 {
		rev = m.rev
		if d.n > 0 {
			rev++
		}
	}
	moved := rev != m.rev || !m.loaded
	if rev > m.rev || full {
		m.rev = rev
	}
	if !m.loaded && len(m.handles) > 0 {
		// Build the search index now rather than in the first search.
		m.idxMu.Lock()
		m.rebuildLocked()
		m.idxMu.Unlock()
	}
	m.loaded = true
	if d.n > 0 || moved {
		m.bumpLocked()
	}
}

func poolWhat(name string) string         { return "pool " + name }
func claimWhat(ref store.BlockRef) string { return "claim " + ref.String() }
func nodeWhat(name string) string         { return "node object " + name }

// badLocked records that what cannot be read, logging it the first time.
func (m *model) badLocked(what string, err error) {
	if m.bad[what] == "" {
		m.log.Warn("address map: skipping an unreadable datastore object", "object", what, "error", err)
	}
	m.bad[what] = err.Error()
}

func (m *model) putPool(p store.Pool, d *dirty) {
	name := p.Spec.Name
	d.pools[name] = true
	d.n++
	delete(m.bad, poolWhat(name))
	m.pools[name] = &poolState{version: p.Version, pool: p.Spec}
}

func (m *model) delPool(name string, d *dirty) {
	d.pools[name] = true
	d.n++
	delete(m.pools, name)
	delete(m.bad, poolWhat(name))
}

func (m *model) putClaim(c store.Claim, d *dirty) {
	d.n++
	delete(m.bad, claimWhat(c.BlockRef))
	m.claims[c.BlockRef] = &claimState{version: c.Version, node: m.nodeName(c.Node)}
	if b := m.blocks[c.BlockRef]; b == nil || b.holder == "" {
		m.claimedOnly(c.BlockRef, d)
	}
}

func (m *model) delClaim(ref store.BlockRef, d *dirty) {
	d.n++
	delete(m.bad, claimWhat(ref))
	delete(m.claims, ref)
	if b := m.blocks[ref]; b != nil && b.holder == "" {
		m.setBlockLocked(ref, nil, d)
	}
}

// claimedOnly shows block ref as its claim has it: no node object holds
// its state (the claiming ADD has not written its object yet, or the
// claim is an orphan).
func (m *model) claimedOnly(ref store.BlockRef, d *dirty) {
	c := m.claims[ref]
	if c == nil {
		m.setBlockLocked(ref, nil, d)
		return
	}
	m.setBlockLocked(ref, &blockState{ref: ref, b: ipam.Block{CIDR: ref.CIDR, Pool: ref.Pool, Node: c.node}}, d)
}

// setBlockLocked puts bs as block ref (nil removes it).
func (m *model) setBlockLocked(ref store.BlockRef, bs *blockState, d *dirty) {
	d.block(ref)
	if old := m.blocks[ref]; old != nil {
		delete(m.byPool[ref.Pool], ref)
		if len(m.byPool[ref.Pool]) == 0 {
			delete(m.byPool, ref.Pool)
		}
		delete(m.blocks, ref)
	}
	if bs == nil {
		return
	}
	m.blocks[ref] = bs
	if m.byPool[ref.Pool] == nil {
		m.byPool[ref.Pool] = map[store.BlockRef]*blockState{}
	}
	m.byPool[ref.Pool][ref] = bs
}

// nodeName is how the map names node n: the node of blocks imported
// without one (store.UnaffineNode) is no node, as in the first layout.
func (m *model) nodeName(n string) string {
	if n == store.UnaffineNode {
		return ""
	}
	return m.intern(n)
}

// putNode replaces the mirror of node object n's name with n (an object
// that cannot be read when bad is set: its old state goes, it is counted
// as unreadable at v).
func (m *model) putNode(n store.Node, d *dirty) {
	d.n++
	name := n.Name
	old := m.nodes[name]
	ns := &nodeState{version: n.Version, blocks: make([]store.BlockRef, 0, len(n.Blocks)), handles: make([]string, 0, len(n.Handles))}
	for _, b := range n.Blocks {
		ref := store.BlockRef{Pool: b.Pool, CIDR: b.CIDR}
		ns.blocks = append(ns.blocks, ref)
		if cur := m.blocks[ref]; cur != nil && cur.holder == name && sameBlock(cur.b, b) {
			continue
		}
		m.setBlockLocked(ref, &blockState{ref: ref, holder: name,
			b: ipam.Block{CIDR: b.CIDR, Pool: b.Pool, Node: m.nodeName(name), Owners: b.Owners}}, d)
	}
	for i := range n.Handles {
		ns.handles = append(ns.handles, n.Handles[i].ID)
		m.putRecord(&n, i, d)
	}
	if old != nil {
		m.undoNode(name, old, ns, d)
	}
	m.nodes[name] = ns
	delete(m.bad, nodeWhat(name))
}

// badNode records node object name at version v as unreadable: what the
// mirror held of it goes.
func (m *model) badNode(name string, v store.Version, err error, d *dirty) {
	d.n++
	if old := m.nodes[name]; old != nil {
		m.undoNode(name, old, &nodeState{}, d)
	}
	m.nodes[name] = &nodeState{version: v}
	m.badLocked(nodeWhat(name), err)
}

func (m *model) delNode(name string, d *dirty) {
	d.n++
	if old := m.nodes[name]; old != nil {
		m.undoNode(name, old, &nodeState{}, d)
	}
	delete(m.nodes, name)
	delete(m.bad, nodeWhat(name))
}

// undoNode removes what node object name held in old and no longer holds
// in now.
func (m *model) undoNode(name string, old, now *nodeState, d *dirty) {
	for _, ref := range old.blocks {
		if slices.Contains(now.blocks, ref) {
			continue
		}
		if cur := m.blocks[ref]; cur != nil && cur.holder == name {
			m.claimedOnly(ref, d)
		}
	}
	keep := make(map[string]bool, len(now.handles))
	for _, id := range now.handles {
		keep[id] = true
	}
	for _, id := range old.handles {
		if !keep[id] {
			m.dropRecord(name, id, d)
		}
	}
}

func sameBlock(a, b ipam.Block) bool {
	if len(a.Owners) != len(b.Owners) {
		return false
	}
	for o, id := range b.Owners {
		if a.Owners[o] != id {
			return false
		}
	}
	return true
}

// putRecord puts handle record h (of node object n, which the mirror
// keeps as it is) as its record in node object n.Name.
func (m *model) putRecord(n *store.Node, i int, d *dirty) {
	h := &n.Handles[i]
	obj := n.Name
	cur := m.handles[h.ID]
	node := m.nodeName(h.Node)
	pi := -1
	if cur != nil {
		pi = slices.IndexFunc(cur.parts, func(p handlePart) bool { return p.obj == obj })
		if pi >= 0 && slices.Equal(cur.parts[pi].ips, h.IPs) && cur.node == node && sameRecord(cur.rec(), h) {
			// Unchanged: hold this object's record, not the old one's.
			cur.recp.Store(h)
			cur.parts[pi].ips = h.IPs
			if len(cur.parts) == 1 {
				cur.ips = h.IPs
			}
			return
		}
	}
	hs := &handleState{id: h.ID, node: node}
	hs.recp.Store(h)
	part := handlePart{obj: obj, ips: h.IPs}
	switch {
	case cur == nil:
		hs.parts = []handlePart{part}
	case pi >= 0:
		hs.parts = slices.Clone(cur.parts)
		hs.parts[pi] = part
	default:
		hs.parts = append(slices.Clone(cur.parts), part)
		slices.SortFunc(hs.parts, func(a, b handlePart) int { return cmp.Compare(a.obj, b.obj) })
	}
	hs.ips = mergeIPs(hs.parts)
	m.setHandle(h.ID, cur, hs, d)
}

// sameRecord reports whether records a and b show the same (their
// addresses aside).
func sameRecord(a, b *ipam.Handle) bool {
	return a.Node == b.Node && a.Namespace == b.Namespace && a.Pod == b.Pod && a.ContainerID == b.ContainerID &&
		a.IfName == b.IfName && a.Network == b.Network && a.PodUID == b.PodUID && a.Created.Equal(b.Created) &&
		a.Sticky == b.Sticky && a.Parked.Equal(b.Parked)
}

// dropRecord removes handle id's record in node object obj.
func (m *model) dropRecord(obj, id string, d *dirty) {
	cur := m.handles[id]
	if cur == nil {
		return
	}
	i := slices.IndexFunc(cur.parts, func(p handlePart) bool { return p.obj == obj })
	if i < 0 {
		return
	}
	if len(cur.parts) == 1 {
		m.setHandle(id, cur, nil, d)
		return
	}
	hs := &handleState{id: cur.id, node: cur.node, parts: slices.Delete(slices.Clone(cur.parts), i, i+1)}
	hs.recp.Store(cur.rec())
	hs.ips = mergeIPs(hs.parts)
	m.setHandle(id, cur, hs, d)
}

func mergeIPs(parts []handlePart) []ipam.HandleIP {
	if len(parts) == 1 {
		return parts[0].ips
	}
	var out []ipam.HandleIP
	for _, p := range parts {
		out = append(out, p.ips...)
	}
	return out
}

// setHandle replaces handle id's state old with hs (nil: the handle is gone).
func (m *model) setHandle(id string, old, hs *handleState, d *dirty) {
	if old != nil {
		d.handle(old)
		delete(m.handles, id)
		if m.podCount[old.node]--; m.podCount[old.node] <= 0 {
			delete(m.podCount, old.node)
		}
	}
	if hs == nil {
		return
	}
	m.handles[id] = hs
	if m.idx != nil {
		m.idxAdded = append(m.idxAdded, hs)
	}
	if m.idxBuilding {
		m.idxPending = append(m.idxPending, hs)
	}
	m.podCount[hs.node]++
	d.handle(hs) // blocks that named it before it arrived counted an orphan
}

func (m *model) intern(s string) string {
	if v, ok := m.strs[s]; ok {
		return v
	}
	m.strs[s] = s
	return s
}

// aggregate computes a block's overview figures.
func (m *model) aggregate(b ipam.Block) blockAgg {
	var a blockAgg
	ps := m.pools[b.Pool]
	if ps != nil {
		a.reserved = b.Size() - ps.pool.PermittedIn(b.CIDR)
	}
	a.inUse = len(b.Owners)
	for _, id := range b.Owners {
		h := m.handles[id]
		switch {
		case h == nil:
			a.orphans++
		case h.node != "" && b.Node != "" && h.node != b.Node:
			a.borrowed++
			if a.borrowers == nil {
				a.borrowers = map[string]int{}
			}
			a.borrowers[h.node]++
		}
	}
	if n := len(m.leaks); n > 0 && n <= b.Size() {
		for addr := range m.leaks {
			if b.CIDR.Contains(addr) {
				a.leaks++
			}
		}
	} else if n > 0 {
		for ord := range b.Size() {
			if _, ok := m.leaks[b.Addr(ord)]; ok {
				a.leaks++
			}
		}
	}
	return a
}

// blockOfLocked returns the claimed block holding addr, if any.
func (m *model) blockOfLocked(addr netip.Addr) (*poolState, *blockState) {
	for _, ps := range m.pools {
		if !ps.pool.CIDR.Contains(addr) {
			continue
		}
		blk, err := addr.Prefix(ps.pool.BlockSize)
		if err != nil {
			continue
		}
		return ps, m.blocks[store.BlockRef{Pool: ps.pool.Name, CIDR: blk}]
	}
	return nil, nil
}

// setLeaks replaces the leak candidates; it reports whether they changed.
func (m *model) setLeaks(list []LeakCandidate) bool {
	sortLeaks(list)
	m.mu.Lock()
	defer m.mu.Unlock()
	if leaksEqual(list, m.leakList) {
		return false
	}
	touched := map[store.BlockRef]bool{}
	mark := func(l LeakCandidate) {
		if _, b := m.blockOfLocked(l.Addr); b != nil {
			touched[b.ref] = true
		}
	}
	for _, l := range m.leakList {
		mark(l)
	}
	m.leakList = list
	m.leaks = make(map[netip.Addr]LeakCandidate, len(list))
	for _, l := range list {
		m.leaks[l.Addr] = l
		mark(l)
	}
	for ref := range touched {
		b := m.blocks[ref]
		b.agg = m.aggregate(b.b)
	}
	m.bumpLocked()
	return true
}

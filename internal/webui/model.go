package webui

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/kv"
)

// change is one key written or deleted in the datastore.
type change struct {
	key     string
	value   []byte
	version int64
	del     bool
}

// model mirrors the pools, blocks and handles of the datastore and keeps
// per-block aggregates current as changes arrive, so that what a request
// needs is ready or a short walk over blocks away. Readers take mu.RLock.
type model struct {
	log *slog.Logger

	mu       sync.RWMutex
	rev      int64  // the store revision the mirror reflects
	gen      uint64 // bumped whenever anything shown changes
	loaded   bool   // the first full read arrived
	status   error  // the last failure to read the datastore, nil when fine
	updated  time.Time
	changed  chan struct{} // closed and replaced when gen moves
	pools    map[string]*poolState
	blocks   map[string]*blockState            // by block key
	byPool   map[string]map[string]*blockState // pool name -> block key -> block
	handles  map[string]*handleState           // by handle key
	byID     map[string]*handleState           // by handle ID
	podCount map[string]int                    // node -> handles
	leaks    map[netip.Addr]LeakCandidate
	leakList []LeakCandidate   // as last reported, sorted
	bad      map[string]string // undecodable keys -> why
	strs     map[string]string // interned node and namespace names

	// idx is the handles' search index, built by the first search (under
	// idxMu, with mu held for reading) and again when idxAdded, the
	// handles put since (under mu), has grown large.
	idxMu       sync.Mutex
	idx         *handleIndex
	idxAdded    []*handleState
	idxBuilding bool // a goroutine is building the next idx
}

type poolState struct {
	version int64
	pool    ipam.Pool
}

type blockState struct {
	key     string
	version int64
	b       ipam.Block
	agg     blockAgg
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

// handleState is what the map keeps of a handle: what it shows, and the
// addresses (to find the blocks a change touches).
type handleState struct {
	key, id              string
	version              int64
	node, namespace, pod string
	containerID, ifName  string
	network, podUID      string // for Handles (the leak rules read them)
	created              time.Time
	ips                  []ipam.HandleIP
}

func newModel(log *slog.Logger) *model {
	return &model{
		log:      log,
		changed:  make(chan struct{}),
		pools:    map[string]*poolState{},
		blocks:   map[string]*blockState{},
		byPool:   map[string]map[string]*blockState{},
		handles:  map[string]*handleState{},
		byID:     map[string]*handleState{},
		podCount: map[string]int{},
		leaks:    map[netip.Addr]LeakCandidate{},
		bad:      map[string]string{},
		strs:     map[string]string{},
	}
}

// watched reports whether the mirror keeps key.
func watched(key string) bool {
	return strings.HasPrefix(key, allocator.PoolPrefix) || strings.HasPrefix(key, allocator.BlockPrefix) ||
		strings.HasPrefix(key, allocator.HandlePrefix)
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

// replace makes the mirror the full state entries (every key under the
// pool, block and handle prefixes at revision rev): it applies what
// differs from the mirror as changes.
func (m *model) replace(rev int64, entries []kv.KeyValue) {
	m.mu.Lock()
	defer m.mu.Unlock()
	seen := make(map[string]bool, len(entries))
	var chs []change
	for _, e := range entries {
		if !watched(e.Key) {
			continue
		}
		seen[e.Key] = true
		if m.versionLocked(e.Key) != e.Version || m.bad[e.Key] != "" {
			chs = append(chs, change{key: e.Key, value: e.Value, version: e.Version})
		}
	}
	for k := range m.pools {
		if !seen[allocator.PoolKey(k)] {
			chs = append(chs, change{key: allocator.PoolKey(k), del: true})
		}
	}
	for k := range m.blocks {
		if !seen[k] {
			chs = append(chs, change{key: k, del: true})
		}
	}
	for k := range m.handles {
		if !seen[k] {
			chs = append(chs, change{key: k, del: true})
		}
	}
	for k := range m.bad {
		if !seen[k] {
			delete(m.bad, k)
		}
	}
	m.applyLocked(rev, chs, true)
}

// apply applies changes seen at revision rev (an etcd watch response).
// Changes older than what the mirror holds are ignored, so replaying
// events the last full read already saw is harmless.
func (m *model) apply(rev int64, chs []change) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.applyLocked(rev, chs, false)
}

func (m *model) versionLocked(key string) int64 {
	switch {
	case strings.HasPrefix(key, allocator.PoolPrefix):
		if p := m.pools[strings.TrimPrefix(key, allocator.PoolPrefix)]; p != nil {
			return p.version
		}
	case strings.HasPrefix(key, allocator.BlockPrefix):
		if b := m.blocks[key]; b != nil {
			return b.version
		}
	case strings.HasPrefix(key, allocator.HandlePrefix):
		if h := m.handles[key]; h != nil {
			return h.version
		}
	}
	return 0
}

// dirty collects what must be recomputed after changes.
type dirty struct {
	blocks map[string]bool // block keys
	pools  map[string]bool // every block of these pools
}

func (d *dirty) block(key string) { d.blocks[key] = true }

func (d *dirty) handle(h *handleState) {
	if h == nil {
		return
	}
	for _, ip := range h.ips {
		if ip.Block.IsValid() {
			d.block(allocator.BlockKey(ip.Pool, ip.Block))
		}
	}
}

func (m *model) applyLocked(rev int64, chs []change, full bool) {
	d := dirty{blocks: map[string]bool{}, pools: map[string]bool{}}
	applied := 0
	for _, c := range chs {
		if !watched(c.key) {
			continue
		}
		have := m.versionLocked(c.key)
		if !full && (c.del && have > c.version || !c.del && have >= c.version && have != 0) {
			continue // older than what we have
		}
		applied++
		var err error
		switch {
		case strings.HasPrefix(c.key, allocator.PoolPrefix):
			err = m.putPool(c, &d)
		case strings.HasPrefix(c.key, allocator.BlockPrefix):
			err = m.putBlock(c, &d)
		default:
			err = m.putHandle(c, &d)
		}
		if err != nil {
			if m.bad[c.key] == "" {
				m.log.Warn("address map: skipping an undecodable datastore value", "key", c.key, "error", err)
			}
			m.bad[c.key] = err.Error()
		} else {
			delete(m.bad, c.key)
		}
	}
	for name := range d.pools {
		for k := range m.byPool[name] {
			d.blocks[k] = true
		}
	}
	for k := range d.blocks {
		if b := m.blocks[k]; b != nil {
			b.agg = m.aggregate(b.b)
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
	if applied > 0 || moved {
		m.bumpLocked()
	}
}

func (m *model) putPool(c change, d *dirty) error {
	name := strings.TrimPrefix(c.key, allocator.PoolPrefix)
	d.pools[name] = true
	if c.del {
		delete(m.pools, name)
		return nil
	}
	var p ipam.Pool
	if err := json.Unmarshal(c.value, &p); err != nil {
		delete(m.pools, name)
		return err
	}
	if p.Name == "" {
		p.Name = name
	}
	m.pools[name] = &poolState{version: c.version, pool: p}
	return nil
}

func (m *model) putBlock(c change, d *dirty) error {
	d.block(c.key)
	old := m.blocks[c.key]
	if old != nil {
		delete(m.byPool[old.b.Pool], c.key)
		if len(m.byPool[old.b.Pool]) == 0 {
			delete(m.byPool, old.b.Pool)
		}
		delete(m.blocks, c.key)
	}
	if c.del {
		return nil
	}
	var b ipam.Block
	if err := json.Unmarshal(c.value, &b); err != nil {
		return err
	}
	if !b.CIDR.IsValid() {
		return fmt.Errorf("block without a cidr")
	}
	if b.Pool == "" {
		// The key names the pool: blocks/<pool>/<cidr>.
		b.Pool, _, _ = strings.Cut(strings.TrimPrefix(c.key, allocator.BlockPrefix), "/")
	}
	b.Node = m.intern(b.Node)
	bs := &blockState{key: c.key, version: c.version, b: b}
	m.blocks[c.key] = bs
	if m.byPool[b.Pool] == nil {
		m.byPool[b.Pool] = map[string]*blockState{}
	}
	m.byPool[b.Pool][c.key] = bs
	return nil
}

func (m *model) putHandle(c change, d *dirty) error {
	if old := m.handles[c.key]; old != nil {
		d.handle(old)
		delete(m.handles, c.key)
		if m.byID[old.id] == old {
			delete(m.byID, old.id)
		}
		if m.podCount[old.node]--; m.podCount[old.node] <= 0 {
			delete(m.podCount, old.node)
		}
	}
	if c.del {
		return nil
	}
	var h ipam.Handle
	if err := json.Unmarshal(c.value, &h); err != nil {
		return err
	}
	if h.ID == "" {
		h.ID = strings.TrimPrefix(c.key, allocator.HandlePrefix)
	}
	hs := &handleState{
		key: c.key, id: h.ID, version: c.version,
		node: m.intern(h.Node), namespace: m.intern(h.Namespace), pod: h.Pod,
		containerID: h.ContainerID, ifName: m.intern(h.IfName),
		network: m.intern(h.Network), podUID: h.PodUID,
		created: h.Created, ips: h.IPs,
	}
	m.handles[c.key] = hs
	if m.idx != nil {
		m.idxAdded = append(m.idxAdded, hs)
	}
	m.byID[hs.id] = hs
	m.podCount[hs.node]++
	d.handle(hs) // blocks that named it before it arrived counted an orphan
	return nil
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
		h := m.byID[id]
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

// blockOf returns the claimed block holding addr, if any.
func (m *model) blockOfLocked(addr netip.Addr) (*poolState, *blockState) {
	for _, ps := range m.pools {
		if !ps.pool.CIDR.Contains(addr) {
			continue
		}
		blk, err := addr.Prefix(ps.pool.BlockSize)
		if err != nil {
			continue
		}
		return ps, m.blocks[allocator.BlockKey(ps.pool.Name, blk)]
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
	touched := map[string]bool{}
	mark := func(l LeakCandidate) {
		if _, b := m.blockOfLocked(l.Addr); b != nil {
			touched[b.key] = true
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
	for k := range touched {
		b := m.blocks[k]
		b.agg = m.aggregate(b.b)
	}
	m.bumpLocked()
	return true
}

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/config"
	"github.com/ipkeeper/ipkeeper/internal/datastore"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

// Both sides allocate from a pool of this CIDR with blocks of this size.
const (
	poolCIDR  = "10.0.0.0/12"
	blockSize = 26
)

// addSpec is one run of ADDs: N in all from Conc workers, worker w's i-th
// on Nodes[(w+i*Conc) mod len(Nodes)], pods in namespace NS.
type addSpec struct {
	Nodes []string
	Conc  int
	N     int
	NS    string
}

// side is one IPAM under measurement. Both keep the handles they made and
// release them all in releaseAll; both run one operation at a time per
// node (ipkeeper's allocator's node lock, Calico's plugin's host-wide IPAM
// lock).
type side interface {
	name() string
	// prefix is the etcd key prefix the side writes under.
	prefix() string
	add(ctx context.Context, s addSpec) (outcome, error)
	releaseAll(ctx context.Context, conc int) (outcome, error)
	close()
}

// ipkeeperSide allocates through the datastore open path the plugin uses
// (the node's lock included) and one allocator, whose per-node lock runs
// one allocation at a time per node as the plugin's node lock does.
type ipkeeperSide struct {
	pfx   string
	st    store.Store
	alloc *allocator.Allocator
	// sets are the range sets of every request: one pool (IPv4) on
	// etcd, one IPv4 and one IPv6 pool on the Kubernetes datastore.
	sets [][]string
	// fresh makes each ADD use an allocator of its own, remembering no
	// node object, as a plugin process does.
	fresh bool
	mu    sync.Mutex
	held  map[string][]string // node -> handle IDs
	seq   atomic.Int64
}

// openIpkeeper is the one call of the datastore's open path.
func openIpkeeper(ctx context.Context, endpoint, prefix string) (store.Store, error) {
	return datastore.Open(ctx, config.Datastore{
		Type: config.DatastoreEtcd, Endpoints: []string{endpoint}, Prefix: prefix,
	}, datastore.Options{Plugin: true})
}

func newIpkeeperSide(ctx context.Context, endpoint, prefix string) (*ipkeeperSide, error) {
	st, err := openIpkeeper(ctx, endpoint, prefix)
	if err != nil {
		return nil, fmt.Errorf("open ipkeeper's datastore: %w", err)
	}
	s, err := ipkeeperOn(ctx, st, ipam.Pool{Name: "bench", CIDR: netip.MustParsePrefix(poolCIDR), BlockSize: blockSize})
	if err != nil {
		return nil, err
	}
	s.pfx = prefix
	return s, nil
}

// ipkeeperOn returns a side allocating on st one address of each pool
// per ADD, after creating the pools; it closes st on failure.
func ipkeeperOn(ctx context.Context, st store.Store, pools ...ipam.Pool) (*ipkeeperSide, error) {
	s := &ipkeeperSide{st: st, alloc: allocator.New(st, slog.New(slog.DiscardHandler)), held: map[string][]string{}}
	for _, p := range pools {
		if _, err := s.alloc.EnsurePool(ctx, p); err != nil {
			_ = st.Close()
			return nil, fmt.Errorf("ipkeeper pool %s: %w", p.Name, err)
		}
		s.sets = append(s.sets, []string{p.Name})
	}
	return s, nil
}

func (s *ipkeeperSide) name() string   { return "ipkeeper" }
func (s *ipkeeperSide) prefix() string { return s.pfx + "/" }
func (s *ipkeeperSide) close()         { _ = s.st.Close() }

// request is the allocation the plugin asks for an ADD of pod k on node:
// the handle with every attribute the plugin records.
func (s *ipkeeperSide) request(node, ns string, k int64) allocator.Request {
	cid := fmt.Sprintf("%064x", k)
	uid := fmt.Sprintf("%08x-0000-4000-8000-%012x", k, k)
	return allocator.Request{
		Handle: ipam.Handle{
			ID:          ipam.HandleID("bench", cid, "eth0"),
			Network:     "bench",
			ContainerID: cid,
			IfName:      "eth0",
			Node:        node,
			NetNS:       "/var/run/netns/cni-" + uid,
			Namespace:   ns,
			Pod:         fmt.Sprintf("pod-%d", k),
			PodUID:      uid,
		},
		Sets: s.sets,
	}
}

func (s *ipkeeperSide) add(ctx context.Context, a addSpec) (outcome, error) {
	return runWorkers(a.Conc, a.N, func(w, i int) error {
		node := a.Nodes[(w+i*a.Conc)%len(a.Nodes)]
		alloc := s.alloc
		if s.fresh {
			alloc = allocator.New(s.st, slog.New(slog.DiscardHandler))
		}
		h, err := alloc.Allocate(ctx, s.request(node, a.NS, s.seq.Add(1)))
		if err != nil {
			return err
		}
		s.mu.Lock()
		s.held[node] = append(s.held[node], h.ID)
		s.mu.Unlock()
		return nil
	}), nil
}

func (s *ipkeeperSide) releaseAll(ctx context.Context, conc int) (outcome, error) {
	s.mu.Lock()
	held := s.held
	s.held = map[string][]string{}
	s.mu.Unlock()
	return releaseByNode(conc, held, func(node, id string) error {
		_, err := s.alloc.Release(ctx, node, id)
		return err
	}), nil
}

// runWorkers runs n operations from conc workers; worker w's i-th
// operation is op(w, i). Failed operations are counted, not timed.
func runWorkers(conc, n int, op func(w, i int) error) outcome {
	var next atomic.Int64
	var mu sync.Mutex
	var o outcome
	var wg sync.WaitGroup
	start := time.Now()
	for w := range conc {
		wg.Go(func() {
			var mine []time.Duration
			for i := 0; next.Add(1) <= int64(n); i++ {
				t0 := time.Now()
				err := op(w, i)
				d := time.Since(t0)
				if err != nil {
					mu.Lock()
					o.fail(err)
					mu.Unlock()
					continue
				}
				mine = append(mine, d)
			}
			mu.Lock()
			o.Lat = append(o.Lat, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	o.Wall, o.N = time.Since(start), len(o.Lat)
	return o
}

// releaseByNode releases every held handle from conc workers, each taking
// one node's handles at a time, in the order they were made.
func releaseByNode(conc int, held map[string][]string, rel func(node, id string) error) outcome {
	nodes := make([]string, 0, len(held))
	for n := range held {
		nodes = append(nodes, n)
	}
	var next atomic.Int64
	var mu sync.Mutex
	var o outcome
	var wg sync.WaitGroup
	start := time.Now()
	for range conc {
		wg.Go(func() {
			var mine []time.Duration
			for k := int(next.Add(1)) - 1; k < len(nodes); k = int(next.Add(1)) - 1 {
				for _, id := range held[nodes[k]] {
					t0 := time.Now()
					if err := rel(nodes[k], id); err != nil {
						mu.Lock()
						o.fail(err)
						mu.Unlock()
						continue
					}
					mine = append(mine, time.Since(t0))
				}
			}
			mu.Lock()
			o.Lat = append(o.Lat, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	o.Wall, o.N = time.Since(start), len(o.Lat)
	return o
}

func (o *outcome) fail(err error) {
	o.Errors++
	if o.FirstErr == "" {
		o.FirstErr = err.Error()
	}
}

// calicoSide is Calico's IPAM library in a process of its own
// (test/bench/calico/side, built against Calico's module by build.sh),
// asked one JSON line at a time.
type calicoSide struct {
	cmd     *exec.Cmd
	in      io.WriteCloser
	out     *bufio.Scanner
	version string
}

// errSide means the Calico side process failed or answered nothing.
var errSide = errors.New("calico side")

func startCalico(_ context.Context, bin, endpoint string) (*calicoSide, error) {
	return startCalicoWith(bin, map[string]any{"op": "setup", "endpoints": endpoint, "cidr": poolCIDR, "blockSize": blockSize})
}

// startCalicoWith starts the Calico side and sends it setup.
func startCalicoWith(bin string, setup map[string]any) (*calicoSide, error) {
	cmd := exec.Command(bin)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%w: start %s: %w", errSide, bin, err)
	}
	c := &calicoSide{cmd: cmd, in: in, out: bufio.NewScanner(out)}
	c.out.Buffer(make([]byte, 1<<20), 64<<20)
	o, v, err := c.ask(setup)
	if err == nil && o.Errors > 0 {
		err = fmt.Errorf("%w: setup: %s", errSide, o.FirstErr)
	}
	if err != nil {
		c.close()
		return nil, err
	}
	c.version = v
	return c, nil
}

func (c *calicoSide) ask(req map[string]any) (outcome, string, error) {
	line, err := json.Marshal(req)
	if err != nil {
		return outcome{}, "", err
	}
	if _, err := c.in.Write(append(line, '\n')); err != nil {
		return outcome{}, "", fmt.Errorf("%w: write: %w", errSide, err)
	}
	if !c.out.Scan() {
		return outcome{}, "", fmt.Errorf("%w: no answer to %s: %v", errSide, line, c.out.Err())
	}
	return parseAnswer(c.out.Bytes())
}

func (c *calicoSide) name() string   { return "calico" }
func (c *calicoSide) prefix() string { return "/calico/" }

func (c *calicoSide) add(_ context.Context, a addSpec) (outcome, error) {
	o, _, err := c.ask(map[string]any{"op": "add", "nodes": a.Nodes, "conc": a.Conc, "n": a.N, "ns": a.NS})
	return o, err
}

func (c *calicoSide) releaseAll(_ context.Context, conc int) (outcome, error) {
	o, _, err := c.ask(map[string]any{"op": "release", "conc": conc})
	return o, err
}

func (c *calicoSide) close() {
	_ = c.in.Close()
	done := make(chan struct{})
	go func() { _ = c.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = c.cmd.Process.Kill()
		<-done
	}
}

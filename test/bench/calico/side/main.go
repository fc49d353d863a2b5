// Command calicoside drives Calico's IPAM library (libcalico-go's clientv3
// on the etcdv3 backend) for test/bench/calico, one request per line of
// standard input, one JSON answer per line of standard output. It allocates
// as Calico's CNI IPAM plugin does: one IPv4 address per ADD, the plugin's
// handle ID and attributes, under a per-node lock (the plugin's host-wide
// IPAM lock file), and releases by handle under the same lock.
//
// It is built by build.sh in a module of its own, never by the project's
// go.mod.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	v3 "github.com/projectcalico/api/pkg/apis/projectcalico/v3"
	"github.com/projectcalico/calico/libcalico-go/lib/apiconfig"
	"github.com/projectcalico/calico/libcalico-go/lib/apis/internalapi"
	client "github.com/projectcalico/calico/libcalico-go/lib/clientv3"
	"github.com/projectcalico/calico/libcalico-go/lib/ipam"
	"github.com/projectcalico/calico/libcalico-go/lib/options"
	"github.com/sirupsen/logrus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// request is one line of standard input.
//
//	{"op":"setup","endpoints":"http://127.0.0.1:2379","cidr":"10.64.0.0/10","blockSize":26}
//	{"op":"add","nodes":["n1"],"conc":4,"n":2000,"ns":"w1"}
//	{"op":"release","conc":16}
type request struct {
	Op        string   `json:"op"`
	Endpoints string   `json:"endpoints,omitempty"`
	CIDR      string   `json:"cidr,omitempty"`
	BlockSize int      `json:"blockSize,omitempty"`
	Nodes     []string `json:"nodes,omitempty"`
	Conc      int      `json:"conc,omitempty"`
	N         int      `json:"n,omitempty"`
	NS        string   `json:"ns,omitempty"`
}

// answer is one line of standard output: the latency of each successful
// operation in nanoseconds, the wall time, the errors and the first one.
type answer struct {
	Lat      []int64 `json:"lat"`
	WallNS   int64   `json:"wallNs"`
	Errors   int     `json:"errors"`
	FirstErr string  `json:"firstErr,omitempty"`
	Version  string  `json:"version,omitempty"`
}

// maxBlocksPerHost is each request's per-node block limit. Calico's default
// is 20 blocks (1 280 addresses of /26 blocks) and the workloads put up to
// 4 000 pods on one node; its global setting requires strict affinity,
// which the CNI plugin's default does not use, so the limit goes with each
// request.
const maxBlocksPerHost = 1024

type side struct {
	cli   client.Interface
	locks sync.Map // node -> *sync.Mutex, the plugin's host-wide IPAM lock
	mu    sync.Mutex
	held  map[string][]string // node -> handle IDs
	nodes map[string]bool     // Node resources created
	seq   atomic.Int64
}

// ensureNodes creates the Node resources calico-node would have made:
// Calico's IPAM refuses to assign on a node it has no Node resource for.
func (s *side) ensureNodes(ctx context.Context, names []string) error {
	for _, name := range names {
		if s.nodes[name] {
			continue
		}
		n := internalapi.NewNode()
		n.Name = name
		if _, err := s.cli.Nodes().Create(ctx, n, options.SetOptions{}); err != nil {
			return fmt.Errorf("create node %s: %w", name, err)
		}
		s.nodes[name] = true
	}
	return nil
}

func (s *side) lock(node string) func() {
	m, _ := s.locks.LoadOrStore(node, &sync.Mutex{})
	mu := m.(*sync.Mutex)
	mu.Lock()
	return mu.Unlock
}

func (s *side) setup(ctx context.Context, r request) error {
	cfg := apiconfig.NewCalicoAPIConfig()
	cfg.Spec.DatastoreType = apiconfig.EtcdV3
	cfg.Spec.EtcdEndpoints = r.Endpoints
	cli, err := client.New(*cfg)
	if err != nil {
		return fmt.Errorf("calico client: %w", err)
	}
	s.cli = cli
	s.held = map[string][]string{}
	s.nodes = map[string]bool{}
	pool := &v3.IPPool{
		ObjectMeta: metav1.ObjectMeta{Name: "bench"},
		Spec: v3.IPPoolSpec{
			CIDR:         r.CIDR,
			BlockSize:    r.BlockSize,
			NodeSelector: "all()",
			AllowedUses:  []v3.IPPoolAllowedUse{v3.IPPoolAllowedUseWorkload},
		},
	}
	if _, err := cli.IPPools().Create(ctx, pool, options.SetOptions{}); err != nil {
		return fmt.Errorf("create pool: %w", err)
	}
	return nil
}

// add runs r.N ADDs from r.Conc workers, worker w's i-th on node
// r.Nodes[(w+i*conc) mod len(nodes)], after creating the Node resources
// that do not exist yet (not timed).
func (s *side) add(ctx context.Context, r request) answer {
	if err := s.ensureNodes(ctx, r.Nodes); err != nil {
		return answer{Errors: r.N, FirstErr: err.Error()}
	}
	var next atomic.Int64
	var mu sync.Mutex
	var a answer
	var wg sync.WaitGroup
	start := time.Now()
	for w := range r.Conc {
		wg.Go(func() {
			var mine []int64
			for i := 0; ; i++ {
				if next.Add(1) > int64(r.N) {
					break
				}
				node := r.Nodes[(w+i*r.Conc)%len(r.Nodes)]
				k := s.seq.Add(1)
				cid := fmt.Sprintf("%064x", k)
				handle := "k8s-pod-network." + cid
				t0 := time.Now()
				err := s.addOne(ctx, node, handle, r.NS, fmt.Sprintf("pod-%d", k))
				d := time.Since(t0)
				if err != nil {
					mu.Lock()
					a.Errors++
					if a.FirstErr == "" {
						a.FirstErr = err.Error()
					}
					mu.Unlock()
					continue
				}
				mine = append(mine, d.Nanoseconds())
				mu.Lock()
				s.held[node] = append(s.held[node], handle)
				mu.Unlock()
			}
			mu.Lock()
			a.Lat = append(a.Lat, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	a.WallNS = time.Since(start).Nanoseconds()
	return a
}

func (s *side) addOne(ctx context.Context, node, handle, ns, pod string) error {
	unlock := s.lock(node)
	defer unlock()
	v4, _, err := s.cli.IPAM().AutoAssign(ctx, ipam.AutoAssignArgs{
		Num4:             1,
		HandleID:         &handle,
		Hostname:         node,
		MaxBlocksPerHost: maxBlocksPerHost,
		Attrs: map[string]string{
			ipam.AttributeNode:      node,
			ipam.AttributeTimestamp: time.Now().UTC().String(),
			ipam.AttributePod:       pod,
			ipam.AttributeNamespace: ns,
		},
		IntendedUse: v3.IPPoolAllowedUseWorkload,
	})
	if err != nil {
		return err
	}
	if v4 == nil || len(v4.IPs) != 1 {
		return fmt.Errorf("no address assigned for %s", handle)
	}
	return nil
}

// release releases every handle this process holds, from r.Conc workers,
// each taking one node's handles in turn.
func (s *side) release(ctx context.Context, r request) answer {
	s.mu.Lock()
	var nodes []string
	for n := range s.held {
		nodes = append(nodes, n)
	}
	s.mu.Unlock()
	var next atomic.Int64
	var mu sync.Mutex
	var a answer
	var wg sync.WaitGroup
	start := time.Now()
	for range r.Conc {
		wg.Go(func() {
			var mine []int64
			for {
				k := int(next.Add(1)) - 1
				if k >= len(nodes) {
					break
				}
				node := nodes[k]
				for _, h := range s.held[node] {
					t0 := time.Now()
					unlock := s.lock(node)
					err := s.cli.IPAM().ReleaseByHandle(ctx, h)
					unlock()
					if err != nil {
						mu.Lock()
						a.Errors++
						if a.FirstErr == "" {
							a.FirstErr = err.Error()
						}
						mu.Unlock()
						continue
					}
					mine = append(mine, time.Since(t0).Nanoseconds())
				}
			}
			mu.Lock()
			a.Lat = append(a.Lat, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	a.WallNS = time.Since(start).Nanoseconds()
	s.held = map[string][]string{}
	return a
}

// version is the Calico version build.sh stamps in.
var version = "unknown"

func main() {
	logrus.SetLevel(logrus.FatalLevel)
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, nil)))
	ctx := context.Background()
	s := &side{}
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<20)
	out := json.NewEncoder(os.Stdout)
	for in.Scan() {
		var r request
		var a answer
		if err := json.Unmarshal(in.Bytes(), &r); err != nil {
			a = answer{Errors: 1, FirstErr: fmt.Sprintf("bad request: %v", err)}
		} else {
			switch r.Op {
			case "setup":
				a.Version = version
				if err := s.setup(ctx, r); err != nil {
					a = answer{Errors: 1, FirstErr: err.Error()}
				}
			case "add":
				a = s.add(ctx, r)
			case "release":
				a = s.release(ctx, r)
			default:
				a = answer{Errors: 1, FirstErr: fmt.Sprintf("unknown op %q", r.Op)}
			}
		}
		if err := out.Encode(a); err != nil {
			slog.Error("write answer", "err", err)
			os.Exit(1)
		}
	}
}

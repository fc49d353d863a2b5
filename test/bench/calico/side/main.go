// Command calicoside drives Calico's IPAM library (libcalico-go's clientv3
// on the etcdv3 backend, or on the Kubernetes datastore when the setup
// request names a kubeconfig) for test/bench/calico, one request per line
// of standard input, one JSON answer per line of standard output. It
// allocates as Calico's CNI IPAM plugin does: one IPv4 address per ADD (and
// one IPv6 address too when the setup names an IPv6 pool), the plugin's
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
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// request is one line of standard input.
//
//	{"op":"setup","endpoints":"http://127.0.0.1:2379","cidr":"10.64.0.0/10","blockSize":26}
//	{"op":"setup","kubeconfig":"/tmp/kc","cidr":"10.64.0.0/16","blockSize":26,"cidr6":"fd00:64::/64","blockSize6":122}
//	{"op":"add","nodes":["n1"],"conc":4,"n":2000,"ns":"w1"}
//	{"op":"release","conc":16}
type request struct {
	Op        string `json:"op"`
	Endpoints string `json:"endpoints,omitempty"`
	// Kubeconfig selects the Kubernetes datastore (Calico's CRDs of
	// crd.projectcalico.org/v1) instead of etcd.
	Kubeconfig string `json:"kubeconfig,omitempty"`
	CIDR       string `json:"cidr,omitempty"`
	BlockSize  int    `json:"blockSize,omitempty"`
	// CIDR6 and BlockSize6, when set, add an IPv6 pool: every ADD then
	// assigns one address of each family in one AutoAssign call.
	CIDR6      string   `json:"cidr6,omitempty"`
	BlockSize6 int      `json:"blockSize6,omitempty"`
	Nodes      []string `json:"nodes,omitempty"`
	Conc       int      `json:"conc,omitempty"`
	N          int      `json:"n,omitempty"`
	NS         string   `json:"ns,omitempty"`
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
	cli client.Interface
	// kube is set on the Kubernetes datastore, where Calico's Node is the
	// Kubernetes Node.
	kube  kubernetes.Interface
	dual  bool
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
		var err error
		if s.kube != nil {
			_, err = s.kube.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
		} else {
			n := internalapi.NewNode()
			n.Name = name
			_, err = s.cli.Nodes().Create(ctx, n, options.SetOptions{})
		}
		if err != nil {
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
	if r.Kubeconfig != "" {
		cfg.Spec.DatastoreType = apiconfig.Kubernetes
		cfg.Spec.Kubeconfig = r.Kubeconfig
		cfg.Spec.CalicoAPIGroup = "crd.projectcalico.org/v1"
		// The library's default (5 requests/s) would make the
		// benchmark measure client-side throttling.
		cfg.Spec.K8sClientQPS, cfg.Spec.K8sClientBurst = 1000, 1000
		rc, err := clientcmd.BuildConfigFromFlags("", r.Kubeconfig)
		if err != nil {
			return fmt.Errorf("kubeconfig: %w", err)
		}
		if s.kube, err = kubernetes.NewForConfig(rc); err != nil {
			return fmt.Errorf("kubernetes client: %w", err)
		}
	} else {
		cfg.Spec.DatastoreType = apiconfig.EtcdV3
		cfg.Spec.EtcdEndpoints = r.Endpoints
	}
	cli, err := client.New(*cfg)
	if err != nil {
		return fmt.Errorf("calico client: %w", err)
	}
	s.cli = cli
	s.held = map[string][]string{}
	s.nodes = map[string]bool{}
	if err := s.createPool(ctx, "bench", r.CIDR, r.BlockSize); err != nil {
		return err
	}
	if r.CIDR6 != "" {
		s.dual = true
		return s.createPool(ctx, "bench6", r.CIDR6, r.BlockSize6)
	}
	return nil
}

func (s *side) createPool(ctx context.Context, name, cidr string, blockSize int) error {
	pool := &v3.IPPool{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v3.IPPoolSpec{
			CIDR:         cidr,
			BlockSize:    blockSize,
			NodeSelector: "all()",
			AllowedUses:  []v3.IPPoolAllowedUse{v3.IPPoolAllowedUseWorkload},
		},
	}
	if _, err := s.cli.IPPools().Create(ctx, pool, options.SetOptions{}); err != nil {
		return fmt.Errorf("create pool %s: %w", name, err)
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
	num6 := 0
	if s.dual {
		num6 = 1
	}
	v4, v6, err := s.cli.IPAM().AutoAssign(ctx, ipam.AutoAssignArgs{
		Num4:             1,
		Num6:             num6,
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
	if s.dual && (v6 == nil || len(v6.IPs) != 1) {
		return fmt.Errorf("no IPv6 address assigned for %s", handle)
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

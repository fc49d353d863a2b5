package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/config"
	"github.com/ipkeeper/ipkeeper/internal/datastore"
	_ "github.com/ipkeeper/ipkeeper/internal/datastore/kubeopen" // the kubernetes datastore
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/kubetest"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

// Names the generator uses.
const (
	podNamespace = "scale"
	network      = "scale"
	poolV4       = "scale-v4"
	poolV6       = "scale-v6"
)

// The pools: /26 and /122 blocks of 64 addresses, room for 5 000 nodes
// of two blocks each in either family.
var (
	pool4 = ipam.Pool{Name: poolV4, CIDR: netip.MustParsePrefix("10.0.0.0/12"), BlockSize: 26, Origin: "cli"}
	pool6 = ipam.Pool{Name: poolV6, CIDR: netip.MustParsePrefix("fd00:5ca1::/96"), BlockSize: 122, Origin: "cli"}
)

// pod is a generated pod and its allocation's handle.
type pod struct {
	name, uid, handle string
}

// cluster is a kube-apiserver holding Node and Pod objects and the
// allocations of those pods in ipkeeper's kubernetes datastore (partition
// prefix), as written through the store contract.
type cluster struct {
	srv    *kubetest.Server
	client kubernetes.Interface
	ds     config.Datastore
	st     store.Store
	alloc  *allocator.Allocator
	nodes  []string

	mu     sync.Mutex
	pods   map[string][]pod // by node
	frozen map[string]bool  // nodes the churn leaves alone
	seq    atomic.Int64
}

func nodeName(i int) string { return fmt.Sprintf("node-%05d", i) }

// openCluster opens the datastore partition prefix with the admin's
// credentials.
func openCluster(ctx context.Context, srv *kubetest.Server, prefix string) (*cluster, error) {
	ds := config.Datastore{Type: config.DatastoreKubernetes, Kubeconfig: srv.AdminKubeconfig, Prefix: prefix}
	st, err := datastore.Open(ctx, ds, datastore.Options{})
	if err != nil {
		return nil, err
	}
	// Protobuf, as the kubelet and the controllers speak it: the API
	// server decodes and encodes a Pod in a fraction of JSON's time.
	rc := rest.CopyConfig(srv.Config)
	rc.ContentType = "application/vnd.kubernetes.protobuf"
	rc.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	rc.QPS, rc.Burst = -1, 0 // no client-side limit: -conc bounds it
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	return &cluster{srv: srv, client: client, ds: ds, st: st, alloc: allocator.New(st, nil), pods: map[string][]pod{}, frozen: map[string]bool{}}, nil
}

// generate creates nodes Node objects and perNode pods bound to each,
// then writes each node's allocations (one dual-stack handle per pod, two
// blocks per family) into the datastore: its claims and its node object,
// built as the allocator builds them, with conc requests at a time.
func (c *cluster) generate(ctx context.Context, nodes, perNode, conc int) error {
	if perNode > 128 {
		return fmt.Errorf("-pods %d: at most 128 per node (two blocks of 64 per family)", perNode)
	}
	t0 := time.Now()
	if _, err := c.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: podNamespace}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	c.nodes = make([]string, nodes)
	for i := range c.nodes {
		c.nodes[i] = nodeName(i)
	}
	var all []pod
	if *flagDirect {
		var rev int64
		var err error
		if all, rev, err = c.writeDirect(ctx, perNode, conc); err != nil {
			return fmt.Errorf("write Node and Pod objects into etcd: %w", err)
		}
		tw := time.Now()
		fmt.Printf("  %d Node and %d Pod objects written into the API server's etcd (%d a transaction, %d at a time) in %v: %.0f objects/s\n",
			nodes, len(all), directBatch, conc, tw.Sub(t0).Round(time.Millisecond), float64(nodes+len(all))/tw.Sub(t0).Seconds())
		if err := c.waitListed(ctx, rev, nodes, len(all)); err != nil {
			return err
		}
		fmt.Printf("  the API server lists them %v later\n", time.Since(tw).Round(time.Millisecond))
	} else {
		var err error
		if all, err = c.createThroughAPI(ctx, perNode, conc); err != nil {
			return err
		}
	}
	t1 := time.Now()
	fmt.Printf("  %d Node and %d Pod objects in %v: %.0f objects/s\n",
		nodes, len(all), t1.Sub(t0).Round(time.Millisecond), float64(nodes+len(all))/t1.Sub(t0).Seconds())

	for _, p := range []ipam.Pool{pool4, pool6} {
		if _, err := c.st.CreatePool(ctx, store.Pool{Spec: p}); err != nil {
			return fmt.Errorf("create pool %s: %w", p.Name, err)
		}
	}
	created := time.Now().UTC().Add(-time.Hour)
	if err := parallel(ctx, nodes, conc, func(n int) error {
		node := c.nodes[n]
		pods := all[n*perNode : (n+1)*perNode]
		obj, claims := nodeObject(node, n, pods, created)
		for _, cl := range claims {
			if _, err := c.st.CreateClaim(ctx, cl); err != nil {
				return fmt.Errorf("claim %s: %w", cl.BlockRef, err)
			}
		}
		if _, err := c.st.CreateNode(ctx, obj); err != nil {
			return fmt.Errorf("node object %s: %w", node, err)
		}
		c.mu.Lock()
		c.pods[node] = append([]pod(nil), pods...)
		c.mu.Unlock()
		return nil
	}); err != nil {
		return err
	}
	t2 := time.Now()
	fmt.Printf("  %d node objects (%d dual-stack records, %d addresses) and %d claims written through the store in %v: %.0f nodes/s\n",
		nodes, len(all), 2*len(all), 4*nodes, t2.Sub(t1).Round(time.Millisecond), float64(nodes)/t2.Sub(t1).Seconds())
	return nil
}

// createThroughAPI creates the Node objects and perNode Pods bound to
// each through the API, conc requests at a time, and returns the pods,
// perNode per node in order.
func (c *cluster) createThroughAPI(ctx context.Context, perNode, conc int) ([]pod, error) {
	nodes := len(c.nodes)
	if err := parallel(ctx, nodes, conc, func(i int) error {
		_, err := c.client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: c.nodes[i]}}, metav1.CreateOptions{})
		return err
	}); err != nil {
		return nil, fmt.Errorf("create nodes: %w", err)
	}
	all := make([]pod, nodes*perNode)
	var done atomic.Int64
	t0 := time.Now()
	if err := parallel(ctx, len(all), conc, func(i int) error {
		node := c.nodes[i/perNode]
		p, err := c.createPod(ctx, node, fmt.Sprintf("p-%s-%03d", node[len("node-"):], i%perNode))
		if err != nil {
			return err
		}
		all[i] = p
		if n := done.Add(1); n%50000 == 0 {
			fmt.Printf("  %d pods created (%v)\n", n, time.Since(t0).Round(time.Second))
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("create pods: %w", err)
	}
	return all, nil
}

// nodeObject builds node's object as the allocator leaves it after its
// pods' ADDs: the n-th node's two blocks of each pool, and one record per
// pod holding an address of each family. It returns the claims of those
// blocks too.
func nodeObject(node string, n int, pods []pod, created time.Time) (store.Node, []store.Claim) {
	obj := store.Node{Name: node}
	var claims []store.Claim
	var ips [][]ipam.HandleIP
	for _, p := range []ipam.Pool{pool4, pool6} {
		first, _ := p.BlockSpan()
		k := 0
		for b := range 2 {
			cidr := p.BlockAt(first + uint64(2*n+b))
			blk := ipam.NewBlock(p, cidr, node)
			for ; k < len(pods); k++ {
				next, addr, err := blk.Assign(p, pods[k].handle)
				if err != nil {
					break // full
				}
				blk = next
				if len(ips) <= k {
					ips = append(ips, nil)
				}
				ips[k] = append(ips[k], ipam.HandleIP{Addr: addr, Pool: p.Name, Block: cidr})
			}
			obj.Blocks = append(obj.Blocks, blk)
			claims = append(claims, store.Claim{BlockRef: store.BlockRef{Pool: p.Name, CIDR: cidr}, Node: node})
		}
	}
	for k, p := range pods {
		obj.Handles = append(obj.Handles, podHandle(node, p, created, ips[k]))
	}
	return obj, claims
}

// podHandle is the record the plugin's ADD writes for p on node.
func podHandle(node string, p pod, created time.Time, ips []ipam.HandleIP) ipam.Handle {
	cid := "c-" + p.name
	return ipam.Handle{ID: p.handle, Network: network, ContainerID: cid, IfName: "eth0", Node: node,
		Namespace: podNamespace, Pod: p.name, PodUID: p.uid, Created: created, IPs: ips}
}

// createPod creates Pod name bound to node.
func (c *cluster) createPod(ctx context.Context, node, name string) (pod, error) {
	obj, err := c.client.CoreV1().Pods(podNamespace).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: podNamespace},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "pause"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		return pod{}, err
	}
	return pod{name: name, uid: string(obj.UID), handle: handleOf(name)}, nil
}

// handleOf is the handle of pod name's allocation.
func handleOf(name string) string { return ipam.HandleID(network, "c-"+name, "eth0") }

// deletePod deletes Pod name at once (grace period 0: no kubelet here).
func (c *cluster) deletePod(ctx context.Context, name string) error {
	return c.client.CoreV1().Pods(podNamespace).Delete(ctx, name, deleteNow())
}

// freeze takes node out of the churn; false if it already was.
func (c *cluster) freeze(node string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	was := c.frozen[node]
	c.frozen[node] = true
	return !was
}

// takePod removes a random pod of node from the cluster's list (none
// when node is frozen).
func (c *cluster) takePod(node string, rng *rand.Rand) (pod, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ps := c.pods[node]
	if len(ps) == 0 || c.frozen[node] {
		return pod{}, false
	}
	i := rng.IntN(len(ps))
	p := ps[i]
	ps[i] = ps[len(ps)-1]
	c.pods[node] = ps[:len(ps)-1]
	return p, true
}

func (c *cluster) addPod(node string, p pod) {
	c.mu.Lock()
	c.pods[node] = append(c.pods[node], p)
	c.mu.Unlock()
}

// parallel runs f(0..n-1), conc at a time, and returns the first error.
func parallel(ctx context.Context, n, conc int, f func(i int) error) error {
	work := make(chan int)
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	var failed atomic.Bool
	for range min(conc, n) {
		wg.Go(func() {
			for i := range work {
				if failed.Load() {
					continue
				}
				if err := f(i); err != nil {
					once.Do(func() { first = err })
					failed.Store(true)
				}
			}
		})
	}
	for i := range n {
		if ctx.Err() != nil {
			break
		}
		work <- i
	}
	close(work)
	wg.Wait()
	if first == nil {
		first = ctx.Err()
	}
	return first
}

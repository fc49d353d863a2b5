package controller

import (
	"context"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/ipkeeper/ipkeeper/internal/leaks"
)

// apiView is the controller's view of the API: shared informers for Pods
// and Nodes (one LIST and one WATCH each, never a per-pod GET), with pods
// and nodes stripped to what the leak rules and the node metric read, so
// that a large cluster's pods fit in little memory.
type apiView struct {
	factory informers.SharedInformerFactory
	pods    cache.SharedIndexInformer
	nodes   cache.SharedIndexInformer

	stop     chan struct{}
	stopOnce sync.Once

	mu sync.Mutex
	// known holds every node name seen in the API since the process
	// started (kept after the node is deleted).
	known map[string]bool
	// lastWatchError is when a pod or node watch last failed.
	lastWatchError time.Time
	now            func() time.Time
}

// newAPIView sets up the informers; onChange is called for events that may
// make allocations leaked (a pod or node deleted, a pod finished or its
// addresses changed).
func newAPIView(client kubernetes.Interface, now func() time.Time, onChange func()) (*apiView, error) {
	v := &apiView{known: map[string]bool{}, now: now, stop: make(chan struct{})}
	v.factory = informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTransform(strip))
	v.pods = v.factory.Core().V1().Pods().Informer()
	v.nodes = v.factory.Core().V1().Nodes().Informer()
	for _, inf := range []cache.SharedIndexInformer{v.pods, v.nodes} {
		if err := inf.SetWatchErrorHandlerWithContext(func(ctx context.Context, r *cache.Reflector, err error) {
			v.mu.Lock()
			v.lastWatchError = v.now()
			v.mu.Unlock()
			cache.DefaultWatchErrorHandler(ctx, r, err)
		}); err != nil {
			return nil, err
		}
	}
	if _, err := v.pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(old, cur any) {
			if podChanged(old, cur) {
				onChange()
			}
		},
		DeleteFunc: func(any) { onChange() },
	}); err != nil {
		return nil, err
	}
	if _, err := v.nodes.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if n, ok := obj.(*corev1.Node); ok {
				v.mu.Lock()
				v.known[n.Name] = true
				v.mu.Unlock()
			}
		},
		DeleteFunc: func(any) { onChange() },
	}); err != nil {
		return nil, err
	}
	return v, nil
}

// podChanged reports whether a pod update may make allocations leaked:
// the pod finished or its addresses changed.
func podChanged(old, cur any) bool {
	o, ok1 := old.(*podRecord)
	c, ok2 := cur.(*podRecord)
	return ok1 && ok2 && (o.pod.Phase != c.pod.Phase || !slices.Equal(o.pod.IPs, c.pod.IPs))
}

// podRecord is what the informer keeps of a Pod: its key and version,
// and what the leak rules read (a few hundred bytes, where a Pod stripped
// of the rest still weighs over a kilobyte).
type podRecord struct {
	metav1.ObjectMeta // name, namespace, UID, resourceVersion, deletionTimestamp
	pod               leaks.Pod
}

func (p *podRecord) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

func (p *podRecord) DeepCopyObject() runtime.Object {
	c := &podRecord{ObjectMeta: *p.ObjectMeta.DeepCopy(), pod: p.pod}
	c.pod.IPs = slices.Clone(p.pod.IPs)
	return c
}

// strip keeps of pods and nodes only what the controller reads: a pod
// becomes a podRecord.
func strip(obj any) (any, error) {
	switch o := obj.(type) {
	case *corev1.Pod:
		return &podRecord{
			ObjectMeta: metav1.ObjectMeta{Name: o.Name, Namespace: o.Namespace, UID: o.UID,
				ResourceVersion: o.ResourceVersion, DeletionTimestamp: o.DeletionTimestamp},
			pod: leaks.PodFromAPI(o),
		}, nil
	case *corev1.Node:
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: o.Name, UID: o.UID, ResourceVersion: o.ResourceVersion}}
		if c := networkNotReady(o); c != nil {
			n.Status.Conditions = []corev1.NodeCondition{{Type: c.Type, Status: c.Status, Reason: c.Reason, Message: c.Message}}
		}
		return n, nil
	}
	return obj, nil
}

// start starts the informers (they run until shutdown) and waits until
// both have listed, or ctx ends.
func (v *apiView) start(ctx context.Context) bool {
	v.factory.Start(v.stop)
	return cache.WaitForCacheSync(ctx.Done(), v.pods.HasSynced, v.nodes.HasSynced)
}

// synced reports whether both informers have listed.
func (v *apiView) synced() bool { return v.pods.HasSynced() && v.nodes.HasSynced() }

// shutdown stops the informers.
func (v *apiView) shutdown() {
	v.stopOnce.Do(func() { close(v.stop) })
	v.factory.Shutdown()
}

// watchErrorSince reports whether a watch failed at or after t.
func (v *apiView) watchErrorSince(t time.Time) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return !v.lastWatchError.IsZero() && !v.lastWatchError.Before(t)
}

// snapshot returns a leaks.Cluster over the informers' caches, with the
// node count taken now.
func (v *apiView) snapshot() *clusterView {
	return &clusterView{v: v, nodeCount: len(v.nodes.GetStore().ListKeys())}
}

// clusterView implements leaks.Cluster over the caches.
type clusterView struct {
	v         *apiView
	nodeCount int
}

func (c *clusterView) Pod(namespace, name string) (leaks.Pod, bool) {
	obj, ok, err := c.v.pods.GetStore().GetByKey(namespace + "/" + name)
	if err != nil || !ok {
		return leaks.Pod{}, false
	}
	p, ok := obj.(*podRecord)
	if !ok {
		return leaks.Pod{}, false
	}
	return p.pod, true
}

func (c *clusterView) NodeExists(name string) bool {
	_, ok, err := c.v.nodes.GetStore().GetByKey(name)
	return err == nil && ok
}

func (c *clusterView) NodeWasKnown(name string) bool {
	c.v.mu.Lock()
	defer c.v.mu.Unlock()
	return c.v.known[name]
}

func (c *clusterView) NodeCount() int { return c.nodeCount }

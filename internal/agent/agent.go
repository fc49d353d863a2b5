// Package agent is ipkeeper-agent, the per-node process of the
// ipkeeper-node DaemonSet that answers the plugin's pod-aware lookups
// from informer caches over a unix socket, so that a pod-aware ADD pays a
// local round trip instead of a kubeconfig parse, a TLS handshake and
// three GETs of the API server.
//
// It keeps client-go informers of the pods bound to its node (field
// selector spec.nodeName), of all namespaces and of its own Node, each
// reduced to the metadata (and the node's pod CIDRs) podinfo.Info holds.
// A pod missing from the cache, or cached with another UID than the one
// asked for (a kubelet's ADD can come a few milliseconds before the watch
// event), is read from the API server instead; an answer never carries a
// pod of another UID. Requests about another node, and about a pod that
// is not bound to the agent's node (its spec.nodeName, as cached or as
// the API server has it), are refused.
//
// With --routes (routes.go, routesmode.go) it also programs kernel routes
// to every other node's blocks via that node's address.
package agent

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/ipkeeper/ipkeeper/internal/plugin"
	"github.com/ipkeeper/ipkeeper/internal/podinfo"
)

// Agent answers lookups for one node.
type Agent struct {
	client kubernetes.Interface
	node   string
	log    *slog.Logger

	factories  []informers.SharedInformerFactory
	synced     []cache.InformerSynced
	pods       corelisters.PodLister
	namespaces corelisters.NamespaceLister
	nodes      corelisters.NodeLister

	startOnce sync.Once

	// cni serves CNI verbs on the kubernetes datastore (EnableCNI); nil
	// when the agent only answers lookups.
	cni        *plugin.Plugin
	kubeAllocs *kubeAllocators
}

// New returns an agent for node that reads with client. Start starts its
// informers.
func New(client kubernetes.Interface, node string, log *slog.Logger) *Agent {
	a := &Agent{client: client, node: node, log: log}
	podF := informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", node).String()
		}), informers.WithTransform(metadataOnly))
	nsF := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTransform(metadataOnly))
	nodeF := informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", node).String()
		}), informers.WithTransform(metadataOnly))
	podInf, nsInf, nodeInf := podF.Core().V1().Pods(), nsF.Core().V1().Namespaces(), nodeF.Core().V1().Nodes()
	a.pods, a.namespaces, a.nodes = podInf.Lister(), nsInf.Lister(), nodeInf.Lister()
	a.synced = []cache.InformerSynced{podInf.Informer().HasSynced, nsInf.Informer().HasSynced, nodeInf.Informer().HasSynced}
	a.factories = []informers.SharedInformerFactory{podF, nsF, nodeF}
	return a
}

// metadataOnly keeps of an object what a lookup answers: the metadata
// without managed fields, and a node's pod CIDRs. A node's hundred pods
// then cost kilobytes, not megabytes.
func metadataOnly(obj any) (any, error) {
	switch o := obj.(type) {
	case *corev1.Pod:
		return &corev1.Pod{ObjectMeta: trimMeta(o.ObjectMeta), Spec: corev1.PodSpec{NodeName: o.Spec.NodeName}}, nil
	case *corev1.Namespace:
		return &corev1.Namespace{ObjectMeta: trimMeta(o.ObjectMeta)}, nil
	case *corev1.Node:
		return &corev1.Node{ObjectMeta: trimMeta(o.ObjectMeta), Spec: corev1.NodeSpec{PodCIDR: o.Spec.PodCIDR, PodCIDRs: o.Spec.PodCIDRs}}, nil
	}
	return obj, nil
}

func trimMeta(m metav1.ObjectMeta) metav1.ObjectMeta {
	m.ManagedFields = nil
	return m
}

// Node is the node the agent serves.
func (a *Agent) Node() string { return a.node }

// Start starts the informers; they stop when ctx ends.
func (a *Agent) Start(ctx context.Context) {
	a.startOnce.Do(func() {
		for _, f := range a.factories {
			f.Start(ctx.Done())
		}
	})
}

// Shutdown waits for the informers' goroutines after ctx of Start ended.
func (a *Agent) Shutdown() {
	for _, f := range a.factories {
		f.Shutdown()
	}
	if a.kubeAllocs != nil {
		a.kubeAllocs.shutdown()
	}
}

// Ready reports whether every cache holds a first full list.
func (a *Agent) Ready() bool {
	for _, s := range a.synced {
		if !s() {
			return false
		}
	}
	return true
}

// Lookup answers what podinfo.Client.Lookup would read: the pod
// namespace/pod (when pod is not empty) with UID uid (when not empty), its
// namespace, and the node, from the caches or, for what they lack, from
// the API server. The first error in the order pod, namespace, node is
// returned, wrapping a podinfo sentinel.
func (a *Agent) Lookup(ctx context.Context, namespace, pod, uid, node string) (*podinfo.Info, error) {
	if node != a.node {
		return nil, fmt.Errorf("%w: asked about node %q, but this agent serves node %q (ipam.nodeName, $NODENAME, $KUBERNETES_NODE_NAME or the hostname must be the agent's node)",
			podinfo.ErrWrongNode, node, a.node)
	}
	ctx, cancel := context.WithTimeout(ctx, podinfo.AgentAPITimeout)
	defer cancel()
	var info podinfo.Info
	var err error
	if pod != "" {
		if info.Pod, err = a.pod(ctx, namespace, pod, uid); err != nil {
			return nil, err
		}
		if info.Namespace, err = a.namespace(ctx, namespace); err != nil {
			return nil, err
		}
	}
	if info.Node, err = a.ownNode(ctx); err != nil {
		return nil, err
	}
	return &info, nil
}

// pod returns the pod from the cache, or from the API server when the
// cache lacks it or holds it with another UID. A pod that is not bound to
// the agent's node is refused (ErrWrongNode): a pod's node never changes
// once bound, and a kubelet starts only the pods bound to its node, so a
// request about another node's pod did not come from this node's
// kubelet. A pod bound so recently that the cache lacks it is read from
// the API server and served.
func (a *Agent) pod(ctx context.Context, namespace, name, uid string) (*podinfo.Object, error) {
	what := "pod " + namespace + "/" + name
	p, err := a.pods.Pods(namespace).Get(name)
	miss := "absent"
	if err == nil {
		if uid == "" || string(p.UID) == uid {
			return a.onNode(what, p)
		}
		miss = "UID " + string(p.UID)
	}
	a.log.Info("pod not in the cache, reading it from the API server", "namespace", namespace, "pod", name, "uid", uid, "cached", miss)
	p, err = a.client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, apiError(err, what, podinfo.ErrPodNotFound)
	}
	if uid != "" && string(p.UID) != uid {
		return nil, fmt.Errorf("%w: %s with UID %s: the pod of that name has UID %s", podinfo.ErrPodNotFound, what, uid, p.UID)
	}
	return a.onNode(what, p)
}

// onNode returns the pod's metadata when the pod is bound to the agent's
// node, else ErrWrongNode naming both nodes.
func (a *Agent) onNode(what string, p *corev1.Pod) (*podinfo.Object, error) {
	switch p.Spec.NodeName {
	case a.node:
		o := object(&p.ObjectMeta)
		return &o, nil
	case "":
		return nil, fmt.Errorf("%w: %s (UID %s) is not bound to a node; this agent serves the pods bound to node %q",
			podinfo.ErrWrongNode, what, p.UID, a.node)
	default:
		return nil, fmt.Errorf("%w: %s (UID %s) is bound to node %q; this agent serves the pods bound to node %q",
			podinfo.ErrWrongNode, what, p.UID, p.Spec.NodeName, a.node)
	}
}

// namespace returns the namespace from the cache, else the API server.
func (a *Agent) namespace(ctx context.Context, name string) (*podinfo.Object, error) {
	ns, err := a.namespaces.Get(name)
	if err != nil {
		a.log.Info("namespace not in the cache, reading it from the API server", "namespace", name)
		if ns, err = a.client.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{}); err != nil {
			return nil, apiError(err, "namespace "+name, podinfo.ErrPodNotFound)
		}
	}
	o := object(&ns.ObjectMeta)
	return &o, nil
}

// ownNode returns the agent's Node from the cache, else the API server.
func (a *Agent) ownNode(ctx context.Context) (*podinfo.Node, error) {
	n, err := a.nodes.Get(a.node)
	if err != nil {
		a.log.Info("node not in the cache, reading it from the API server", "node", a.node)
		if n, err = a.client.CoreV1().Nodes().Get(ctx, a.node, metav1.GetOptions{}); err != nil {
			return nil, apiError(err, "node "+a.node, podinfo.ErrNodeNotFound)
		}
	}
	return podinfo.NewNode(object(&n.ObjectMeta), n.Spec.PodCIDR, n.Spec.PodCIDRs)
}

// object is the podinfo form of an object's metadata.
func object(m *metav1.ObjectMeta) podinfo.Object {
	o := podinfo.Object{Namespace: m.Namespace, Name: m.Name, UID: string(m.UID), Labels: m.Labels, Annotations: m.Annotations}
	if r := metav1.GetControllerOfNoCopy(m); r != nil {
		o.Owner = &podinfo.Owner{APIVersion: r.APIVersion, Kind: r.Kind, Name: r.Name, UID: string(r.UID)}
	}
	return o
}

// apiError wraps an API error in the podinfo sentinel the plugin's direct
// mode would have returned for it; notFound is a 404's.
func apiError(err error, what string, notFound error) error {
	code := 0
	if s, ok := err.(apierrors.APIStatus); ok {
		code = int(s.Status().Code)
	}
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Errorf("%w: %s: %w", notFound, what, err)
	case apierrors.IsUnauthorized(err), apierrors.IsForbidden(err):
		return fmt.Errorf("%w: GET %s: %d %w", podinfo.ErrDenied, what, code, err)
	default:
		return fmt.Errorf("%w: GET %s: %w", podinfo.ErrUnavailable, what, err)
	}
}

package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes/scheme"
)

// The API server's etcd keys (its default --etcd-prefix): Node objects
// are stored under "minions".
const (
	registryPods  = "/registry/pods/"
	registryNodes = "/registry/minions/"
)

// directBatch is how many objects one etcd transaction puts (etcd's
// default limit is 128 operations).
const directBatch = 100

// storageEncoder encodes core/v1 objects as the API server stores them:
// protobuf with its "k8s\x00" prefix, apiVersion and kind in the envelope.
func storageEncoder() runtime.Encoder {
	return scheme.Codecs.EncoderForVersion(protobuf.NewSerializer(scheme.Scheme, scheme.Scheme), corev1.SchemeGroupVersion)
}

// directPod is pod name bound to node as the API server stores a created
// Pod (uid, creation time, phase Pending); resourceVersion is never
// stored, the API server takes it from etcd's revision.
func directPod(node, name string, created metav1.Time) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: podNamespace, UID: uuid.NewUUID(), CreationTimestamp: created},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "pause",
			TerminationMessagePath: "/dev/termination-log", TerminationMessagePolicy: corev1.TerminationMessageReadFile,
			ImagePullPolicy: corev1.PullIfNotPresent}},
			RestartPolicy: corev1.RestartPolicyAlways, DNSPolicy: corev1.DNSClusterFirst, SchedulerName: corev1.DefaultSchedulerName,
			SecurityContext: &corev1.PodSecurityContext{}},
		Status: corev1.PodStatus{Phase: corev1.PodPending, QOSClass: corev1.PodQOSBestEffort},
	}
}

// writeDirect puts nodes' Node objects and perNode Pods bound to each
// straight into the API server's etcd (directBatch to a transaction, conc
// transactions at a time), then waits until the API server's watch cache
// lists them all. It returns the pods, perNode per node in order.
func (c *cluster) writeDirect(ctx context.Context, perNode, conc int) ([]pod, int64, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{c.srv.EtcdEndpoint()}, DialTimeout: 10 * time.Second})
	if err != nil {
		return nil, 0, err
	}
	defer cli.Close()
	enc := storageEncoder()
	created := metav1.NewTime(time.Now().UTC().Truncate(time.Second))
	encode := func(o runtime.Object) (string, error) {
		var b bytes.Buffer
		if err := enc.Encode(o, &b); err != nil {
			return "", err
		}
		return b.String(), nil
	}
	type kv struct{ key, val string }
	nodes := len(c.nodes)
	all := make([]pod, nodes*perNode)
	batches := (nodes + len(all) + directBatch - 1) / directBatch
	var mu sync.Mutex
	var rev int64
	err = parallel(ctx, batches, conc, func(b int) error {
		ops := make([]clientv3.Op, 0, directBatch)
		for i := b * directBatch; i < min((b+1)*directBatch, nodes+len(all)); i++ {
			var o kv
			if i < nodes {
				v, err := encode(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: c.nodes[i], UID: uuid.NewUUID(), CreationTimestamp: created}})
				if err != nil {
					return err
				}
				o = kv{registryNodes + c.nodes[i], v}
			} else {
				k := i - nodes
				node := c.nodes[k/perNode]
				name := fmt.Sprintf("p-%s-%03d", node[len("node-"):], k%perNode)
				p := directPod(node, name, created)
				v, err := encode(p)
				if err != nil {
					return err
				}
				o = kv{registryPods + podNamespace + "/" + name, v}
				all[k] = pod{name: name, uid: string(p.UID), handle: handleOf(name)}
			}
			ops = append(ops, clientv3.OpPut(o.key, o.val))
		}
		resp, err := cli.Txn(ctx).Then(ops...).Commit()
		if err != nil {
			return err
		}
		mu.Lock()
		rev = max(rev, resp.Header.Revision)
		mu.Unlock()
		return nil
	})
	return all, rev, err
}

// waitListed waits until the API server's watch cache holds etcd's
// revision rev and lists want Pods and at least nodes Node objects: a
// LIST of one object at rev or newer (served by the watch cache, which
// waits for rev) tells the count of the rest.
func (c *cluster) waitListed(ctx context.Context, rev int64, nodes, want int) error {
	deadline := time.Now().Add(10 * time.Minute)
	opts := metav1.ListOptions{ResourceVersion: fmt.Sprint(rev), ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan, Limit: 1}
	for {
		pl, err := c.client.CoreV1().Pods(podNamespace).List(ctx, opts)
		var nl *corev1.NodeList
		if err == nil {
			nl, err = c.client.CoreV1().Nodes().List(ctx, opts)
		}
		if err == nil {
			np, nn := listed(pl.ListMeta, len(pl.Items)), listed(nl.ListMeta, len(nl.Items))
			if np == want && nn >= nodes {
				return nil
			}
			err = fmt.Errorf("the API server lists %d of %d pods and %d of %d nodes", np, want, nn, nodes)
		}
		if time.Now().After(deadline) {
			return err
		}
		if !apierrors.IsTimeout(err) && !apierrors.IsResourceExpired(err) && !errors.Is(err, context.DeadlineExceeded) {
			fmt.Printf("  waiting for the API server to list what was written: %v\n", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Second):
		}
	}
}

// listed is the number of objects a paginated list holds in all: those
// returned and the remaining count.
func listed(m metav1.ListMeta, n int) int {
	if m.RemainingItemCount != nil {
		return n + int(*m.RemainingItemCount)
	}
	return n
}

package node

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestExhaustionThroughKubelet fills a range of four addresses with six
// pods: four run, the other two stay ContainerCreating with ipkeeper's
// "pool exhausted" in their events (their sandboxes' ADDs fail with code
// 100, which the kubelet reports in FailedCreatePodSandBox events; the
// node's network stays ready: STATUS does not fail for a full pool), and
// they start — with the addresses of the pods deleted to make room — once
// two of the running pods are deleted.
func TestExhaustionThroughKubelet(t *testing.T) {
	n := startNode(t, nodeOptions{leakGrace: 10 * time.Minute, ranges: fourAddresses})
	ns := n.newNamespace(t, nil)
	first := n.createPods(t, ns, "a", 4, nil)
	running := n.waitRunning(t, ns, first)
	extra := n.createPods(t, ns, "b", 2, nil)
	for _, name := range extra {
		n.waitFor(t, "pod "+name+"'s events say the pool is exhausted", podTimeout, func() (bool, string) {
			msgs := n.podEvents(t, ns, name)
			for _, m := range msgs {
				if strings.Contains(m, "pool exhausted") {
					return true, ""
				}
			}
			return false, fmt.Sprint(msgs)
		})
	}
	if ok, msg := n.networkReady(t); !ok {
		t.Errorf("the runtime reports NetworkReady false on the full range (%s), want ready", msg)
	}
	if !n.podHasEvent(t, ns, extra[0], "FailedCreatePodSandBox") {
		t.Errorf("pod %s: no FailedCreatePodSandBox event; events: %v", extra[0], n.podEvents(t, ns, extra[0]))
	}
	pods := n.pods(t, ns)
	for _, name := range extra {
		if p := pods[name]; p.Status.Phase != corev1.PodPending || len(p.Status.PodIPs) != 0 {
			t.Errorf("pod %s: %s with podIPs %v, want Pending without an address", name, podState(p), p.Status.PodIPs)
		}
	}
	if t.Failed() {
		return
	}
	freed := map[string]bool{}
	for _, name := range first[:2] {
		for _, a := range podAddrs(running[name]) {
			freed[a.String()] = true
		}
	}
	n.deletePods(t, ns, first[:2])
	started := n.waitRunning(t, ns, extra)
	for _, name := range extra {
		for _, a := range podAddrs(started[name]) {
			if !freed[a.String()] {
				t.Errorf("pod %s got %s, want one of the deleted pods' %v", name, a, freed)
			}
		}
	}
	left := append(first[2:], extra...)
	all := n.waitRunning(t, ns, left)
	checkPodsMatchRecords(t, all, n.handles(t))
	if t.Failed() {
		return
	}
	n.deletePods(t, ns, left)
	n.waitGone(t, ns)
	n.waitFor(t, "ipkeeper holds no address once the pods are gone", podTimeout, func() (bool, string) {
		hs := n.handles(t)
		return len(hs) == 0, handleList(hs)
	})
	n.checkClean(t)
}

// podEvents are the messages of the events about the pod.
func (n *node) podEvents(t *testing.T, namespace, pod string) []string {
	t.Helper()
	list, err := n.srv.Client.CoreV1().Events(namespace).List(context.Background(),
		metav1.ListOptions{FieldSelector: "involvedObject.kind=Pod,involvedObject.name=" + pod})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range list.Items {
		out = append(out, e.Reason+": "+e.Message)
	}
	return out
}

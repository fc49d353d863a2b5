package e2e

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipkeeper/ipkeeper/internal/consistency"
	"github.com/ipkeeper/ipkeeper/test/e2e/cnirun"
)

// TestStickyStatefulSetPod runs the plugin binary on two "nodes" sharing
// one store, the pods' metadata read from a real kube-apiserver (directly
// and through each node's ipkeeper-agent): a StatefulSet's pod keeps its
// address when it is deleted on node-a and created again on node-b, IPv4
// (ipam.sticky in the config) and IPv6 (the namespace's
// ipkeeper.io/sticky annotation); a second live virt-launcher pod of one
// virtual machine gets no address and an error naming the first.
func TestStickyStatefulSetPod(t *testing.T) {
	needIpkeeper(t)
	needCtl(t)
	base := newKubeFixture(t)
	ctx := ctxT(t)
	if _, err := base.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns-sticky",
		Annotations: map[string]string{"ipkeeper.io/sticky": "true"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, mode := range modes {
		for _, fam := range []struct {
			name, ns string
			ipam     map[string]any
			prefix   string
		}{
			{"IPv4", "ns-plain", map[string]any{"sticky": true}, "10.95.0."},
			{"IPv6", "ns-sticky", map[string]any{"pools": []string{"blue6"}, "ranges": nil}, "fd98::"},
		} {
			t.Run(mode+"/"+fam.name, func(t *testing.T) {
				if mode == "agent" {
					needAgent(t)
				}
				f := base.inMode(t, mode)
				set := "db-" + mode + "-" + strings.ToLower(fam.name)
				sts := f.statefulSet(t, fam.ns, set)
				owner := metav1.OwnerReference{APIVersion: "apps/v1", Kind: "StatefulSet", Name: sts.Name, UID: sts.UID, Controller: ptr(true)}
				confA, confB := f.podConf(t, "node-a", fam.ipam), f.podConf(t, "node-b", fam.ipam)

				p1 := f.ownedPod(t, fam.ns, set+"-0", "node-a", owner, nil)
				before := addrsOf(t, confA, runCNI(t, podCall("sticky-a", p1, confA)))
				t.Logf("%s/%s on node-a: %v", p1.Namespace, p1.Name, before)
				del := podCall("sticky-a", p1, confA)
				del.Command = "DEL"
				if out := runCNI(t, del); out.ExitCode != 0 {
					t.Fatalf("DEL: %v", out)
				}
				f.deletePod(t, p1)
				p2 := f.ownedPod(t, fam.ns, set+"-0", "node-b", owner, nil)
				after := addrsOf(t, confB, runCNI(t, podCall("sticky-b", p2, confB)))
				t.Logf("%s/%s recreated on node-b: %v", p2.Namespace, p2.Name, after)
				if len(before) != 1 || len(after) != 1 || before[0] != after[0] || !strings.HasPrefix(after[0].String(), fam.prefix) {
					t.Fatalf("address before %v, after %v", before, after)
				}
				cf := writeTemp(t, confB)
				show := string(ctl(t, cf, "ip", "show", after[0].String()))
				if !strings.Contains(show, "(sticky pod/"+fam.ns+"/"+set+"-0)") || !strings.Contains(show, "node-b") {
					t.Errorf("ip show:\n%s", show)
				}
				var rep consistency.Report
				decodeJSON(t, ctl(t, cf, "check", "-o", "json"), &rep)
				if len(rep.Problems) != 0 {
					t.Fatalf("check: %+v", rep.Problems)
				}

				// Two live launcher pods of one virtual machine.
				vmi := metav1.OwnerReference{APIVersion: "kubevirt.io/v1", Kind: "VirtualMachineInstance", Name: "vm1", UID: "u-vm1", Controller: ptr(true)}
				labels := map[string]string{"vm.kubevirt.io/name": "vm1"}
				first := f.ownedPod(t, fam.ns, "virt-launcher-vm1-a-"+mode, "node-a", vmi, labels)
				addrsOf(t, confA, runCNI(t, podCall("vm1-a", first, confA)))
				forged := f.ownedPod(t, fam.ns, "virt-launcher-vm1-b-"+mode, "node-b", vmi, labels)
				e := wantCNIError(t, "ADD", runCNI(t, podCall("vm1-b", forged, confB)), 102)
				if !strings.Contains(e.Msg, "vm/"+fam.ns+"/vm1") || !strings.Contains(e.Msg, first.Namespace+"/"+first.Name) {
					t.Errorf("message %q does not name the identity and its holder", e.Msg)
				}
				t.Logf("second launcher pod: code %d: %s", e.Code, e.Msg)
			})
		}
	}
}

func ptr[T any](v T) *T { return &v }

func runCNI(t *testing.T, c cnirun.Call) cnirun.Output {
	t.Helper()
	out, err := cnirun.Run(ctxT(t), ipkeeperBin, c)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// statefulSet creates a StatefulSet of one replica (no controller makes
// its pods: the test does).
func (f *kubeFixture) statefulSet(t *testing.T, ns, name string) *appsv1.StatefulSet {
	t.Helper()
	one := int32(1)
	labels := map[string]string{"app": name}
	s, err := f.cs.AppsV1().StatefulSets(ns).Create(ctxT(t), &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.StatefulSetSpec{Replicas: &one, Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "example.invalid/c"}}}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// ownedPod creates a pod bound to node, controlled by owner.
func (f *kubeFixture) ownedPod(t *testing.T, ns, name, node string, owner metav1.OwnerReference, labels map[string]string) *corev1.Pod {
	t.Helper()
	p, err := f.cs.CoreV1().Pods(ns).Create(ctxT(t), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, OwnerReferences: []metav1.OwnerReference{owner}},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "example.invalid/c"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// deletePod deletes a pod at once and waits until its node's agent (if
// any) has seen it go.
func (f *kubeFixture) deletePod(t *testing.T, p *corev1.Pod) {
	t.Helper()
	zero := int64(0)
	if err := f.cs.CoreV1().Pods(p.Namespace).Delete(ctxT(t), p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	if f.agents != nil {
		f.agents.waitGone(t, p.Spec.NodeName, p)
	}
}

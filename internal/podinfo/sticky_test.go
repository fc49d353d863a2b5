package podinfo

import (
	"errors"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
)

func TestStickyIdentity(t *testing.T) {
	sts := &Owner{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "pg"}
	vmi := &Owner{APIVersion: "kubevirt.io/v1", Kind: "VirtualMachineInstance", Name: "fedora"}
	rs := &Owner{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-5d"}
	on := map[string]string{AnnotationSticky: "true"}
	off := map[string]string{AnnotationSticky: "false"}
	launcher := map[string]string{LabelKubeVirtVM: "fedora"}
	for _, c := range []struct {
		name    string
		config  bool
		ns, pod map[string]string
		labels  map[string]string
		owner   *Owner
		want    string
		wantErr bool
	}{
		{name: "StatefulSet pod, config", config: true, owner: sts, want: "pod/db/pg-0"},
		{name: "StatefulSet pod, not opted in", owner: sts},
		{name: "StatefulSet pod, namespace opts in", ns: on, owner: sts, want: "pod/db/pg-0"},
		{name: "StatefulSet pod, pod opts out of the namespace's", ns: on, pod: off, owner: sts},
		{name: "StatefulSet pod, pod opts out of the config's", config: true, pod: off, owner: sts},
		{name: "virt-launcher pod", pod: on, labels: launcher, owner: vmi, want: "vm/db/fedora"},
		{name: "VM label without a VMI owner (forged)", pod: on, labels: launcher, owner: sts, want: "pod/db/pg-0"},
		{name: "VMI owner without the label", pod: on, owner: vmi},
		{name: "ReplicaSet pod", config: true, owner: rs},
		{name: "no owner", config: true},
		{name: "bad annotation", pod: map[string]string{AnnotationSticky: "yes"}, owner: sts, wantErr: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			info := &Info{
				Namespace: &Object{Name: "db", Annotations: c.ns},
				Pod:       &Object{Namespace: "db", Name: "pg-0", Annotations: c.pod, Labels: c.labels, Owner: c.owner},
			}
			id, ok, err := info.StickyIdentity(c.config)
			if c.wantErr != (err != nil) || err != nil && !errors.Is(err, ErrAnnotation) {
				t.Fatalf("err %v", err)
			}
			if got := id.String(); got != c.want || ok != (c.want != "") {
				t.Fatalf("%q %v, want %q", got, ok, c.want)
			}
			if ok {
				if back, err := ipam.ParseStickyID(id.String()); err != nil || back != id {
					t.Fatalf("%+v %v", back, err)
				}
			}
		})
	}
	var none *Info
	if _, ok, err := none.StickyIdentity(true); ok || err != nil {
		t.Fatal("no pod info: not sticky")
	}
}

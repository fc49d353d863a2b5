package podinfo

import (
	"fmt"
	"strings"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
)

// Sticky addresses: the annotation that opts a pod in or out, and what
// names the identity its addresses stay reserved for.
const (
	// AnnotationSticky is "true" or "false" on a pod or its namespace:
	// the pod's decides, else the namespace's, else ipam.sticky.
	AnnotationSticky = "ipkeeper.io/sticky"
	// LabelKubeVirtVM is the label KubeVirt puts on a virtual machine's
	// virt-launcher pod: the machine's name.
	LabelKubeVirtVM = "vm.kubevirt.io/name"
)

// StickyIdentity returns the identity the pod's addresses stay reserved
// for when it goes away, and whether they are sticky: opted in (the
// pod's AnnotationSticky, else its namespace's, else byConfig) and the
// pod is a StatefulSet's or a KubeVirt virtual machine's launcher pod
// (StickyChoice). An annotation that is not "true" or "false" wraps
// ErrAnnotation.
func (i *Info) StickyIdentity(byConfig bool) (ipam.StickyID, bool, error) {
	id, annotated, err := i.StickyChoice()
	if err != nil || id.Kind == "" {
		return ipam.StickyID{}, false, err
	}
	on := byConfig
	if annotated != nil {
		on = *annotated
	}
	if !on {
		return ipam.StickyID{}, false, nil
	}
	return id, true, nil
}

// StickyChoice returns the identity the pod's addresses would stay
// reserved for — its namespace and name when its controlling owner is a
// StatefulSet, its namespace and the machine's name (LabelKubeVirtVM)
// when it is a KubeVirt VirtualMachineInstance's launcher pod, else the
// zero StickyID — and what the annotations say: the pod's
// AnnotationSticky, else its namespace's, nil when neither has one (the
// network config and the pools then decide). An annotation that is not
// "true" or "false" wraps ErrAnnotation.
func (i *Info) StickyChoice() (ipam.StickyID, *bool, error) {
	if i == nil || i.Pod == nil {
		return ipam.StickyID{}, nil, nil
	}
	var annotated *bool
	for _, o := range []struct {
		obj  *Object
		name string
	}{{i.Namespace, "namespace"}, {i.Pod, "pod"}} {
		if o.obj == nil {
			continue
		}
		v, ok := o.obj.Annotations[AnnotationSticky]
		if !ok {
			continue
		}
		switch strings.TrimSpace(v) {
		case "true":
			annotated = new(bool)
			*annotated = true
		case "false":
			annotated = new(bool)
		default:
			return ipam.StickyID{}, nil, fmt.Errorf("%w: %s %s annotation %s: %q is not \"true\" or \"false\"", ErrAnnotation, o.name, o.obj.Name, AnnotationSticky, v)
		}
	}
	p, owner := i.Pod, i.Pod.Owner
	switch {
	case owner == nil:
	case owner.Kind == "StatefulSet" && strings.HasPrefix(owner.APIVersion, "apps/"):
		return ipam.StickyID{Kind: ipam.StickyPod, Namespace: p.Namespace, Name: p.Name}, annotated, nil
	case owner.Kind == "VirtualMachineInstance" && strings.HasPrefix(owner.APIVersion, "kubevirt.io/") && p.Labels[LabelKubeVirtVM] != "":
		return ipam.StickyID{Kind: ipam.StickyVM, Namespace: p.Namespace, Name: p.Labels[LabelKubeVirtVM]}, annotated, nil
	}
	return ipam.StickyID{}, annotated, nil
}

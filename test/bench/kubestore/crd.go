package main

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// The prototype CRDs the bench installs in its own kube-apiserver. Their
// kinds are Proto* so that they never collide with the project's CRDs
// that kubetest applies from deploy/.
const (
	group   = "ipkeeper.io"
	version = "v1alpha1"
)

// The prototype resources.
const (
	resBlock     = "protoblocks"         // one block, self-describing owners (owners map atomic)
	resBlockGran = "protoblockgranulars" // the same, owners map granular (for managedFields size)
	resNode      = "protonodes"          // all of one node's blocks and handles
)

var kinds = map[string]string{resBlock: "ProtoBlock", resBlockGran: "ProtoBlockGranular", resNode: "ProtoNode"}

func str() map[string]any { return map[string]any{"type": "string"} }

func obj(props map[string]any, required ...string) map[string]any {
	o := map[string]any{"type": "object", "properties": props}
	if len(required) > 0 {
		r := make([]any, len(required))
		for i, s := range required {
			r[i] = s
		}
		o["required"] = r
	}
	return o
}

func mapOf(v map[string]any, atomic bool) map[string]any {
	m := map[string]any{"type": "object", "additionalProperties": v}
	if atomic {
		m["x-kubernetes-map-type"] = "atomic"
	}
	return m
}

func freeList() map[string]any {
	return map[string]any{"type": "array", "items": map[string]any{"type": "integer", "minimum": int64(0), "maximum": int64(65535)},
		"x-kubernetes-list-type": "atomic", "maxItems": int64(65536)}
}

func ownerSchema() map[string]any {
	return obj(map[string]any{
		"handle": str(), "node": str(), "network": str(), "containerID": str(), "ifname": str(),
		"namespace": str(), "pod": str(), "podUID": str(), "netns": str(),
		"created": map[string]any{"type": "string", "format": "date-time"},
	}, "handle")
}

func blockSchema(atomic bool) map[string]any {
	return obj(map[string]any{
		"cidr": str(), "pool": str(), "node": str(),
		"owners": mapOf(ownerSchema(), atomic),
		"free":   freeList(),
	}, "cidr", "pool", "free")
}

func nodeSchema() map[string]any {
	nb := obj(map[string]any{"cidr": str(), "pool": str(), "owners": mapOf(str(), true), "free": freeList()}, "cidr", "pool", "free")
	ip := obj(map[string]any{"addr": str(), "pool": str(), "block": str()})
	h := obj(map[string]any{
		"network": str(), "containerID": str(), "ifname": str(), "namespace": str(), "pod": str(), "podUID": str(),
		"netns": str(), "node": str(), "created": map[string]any{"type": "string", "format": "date-time"},
		"ips": map[string]any{"type": "array", "items": ip, "x-kubernetes-list-type": "atomic"},
	})
	return obj(map[string]any{"node": str(), "blocks": mapOf(nb, true), "handles": mapOf(h, true)}, "node")
}

// crd returns the CustomResourceDefinition of a prototype resource.
func crd(res string, spec map[string]any, columns []any) *unstructured.Unstructured {
	kind := kinds[res]
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1",
		"kind":       "CustomResourceDefinition",
		"metadata":   map[string]any{"name": res + "." + group},
		"spec": map[string]any{
			"group": group,
			"scope": "Cluster",
			"names": map[string]any{"plural": res, "singular": lower(kind), "kind": kind, "listKind": kind + "List"},
			"versions": []any{map[string]any{
				"name": version, "served": true, "storage": true,
				"schema":                   map[string]any{"openAPIV3Schema": obj(map[string]any{"spec": spec})},
				"additionalPrinterColumns": columns,
			}},
		},
	}}
}

func col(name, path string) map[string]any {
	return map[string]any{"name": name, "type": "string", "jsonPath": path}
}

func lower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// crds are the prototype CRDs.
func crds() []*unstructured.Unstructured {
	bc := []any{col("Node", ".spec.node"), col("CIDR", ".spec.cidr"), col("Pool", ".spec.pool")}
	return []*unstructured.Unstructured{
		crd(resBlock, blockSchema(true), bc),
		crd(resBlockGran, blockSchema(false), bc),
		crd(resNode, nodeSchema(), []any{col("Node", ".spec.node")}),
	}
}

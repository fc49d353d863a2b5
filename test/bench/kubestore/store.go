package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"

	"github.com/ipkeeper/ipkeeper/internal/kv"
	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/store/etcd"
)

// errConflict is a failed compare-and-swap on either backend.
var errConflict = errors.New("conflict")

// backend is one object store the CAS measurement runs on: whole-object
// create, compare-and-swap update, get. Versions are opaque strings.
type backend interface {
	name() string
	create(ctx context.Context, res, name string, labels map[string]string, spec any) (string, error)
	// update writes spec over prev (the caller's last-known copy, whose
	// version is ver) if the object is still at ver.
	update(ctx context.Context, res, name string, labels map[string]string, prev, spec any, ver string) (string, error)
	get(ctx context.Context, res, name string) ([]byte, string, error)
}

// kubeStore talks to the CRDs through client-go's REST client with JSON
// bodies (a typed client without generated types).
type kubeStore struct {
	rc *rest.RESTClient
	// patch sends updates as JSON merge patches carrying the
	// resourceVersion (a precondition) instead of whole objects (node
	// specs only).
	patch bool
}

func newREST(cfg *rest.Config) (*rest.RESTClient, error) {
	c := rest.CopyConfig(cfg)
	c.GroupVersion = &schema.GroupVersion{Group: group, Version: version}
	c.APIPath = "/apis"
	c.NegotiatedSerializer = scheme.Codecs.WithoutConversion()
	c.ContentType = "application/json"
	c.QPS, c.Burst = 1e6, 1e6
	return rest.RESTClientFor(c)
}

func (k *kubeStore) name() string { return "kube" }

type meta struct {
	Name            string            `json:"name"`
	ResourceVersion string            `json:"resourceVersion,omitempty"`
	Labels          map[string]string `json:"labels,omitempty"`
}

type object struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   meta   `json:"metadata"`
	Spec       any    `json:"spec"`
}

func body(res, name string, labels map[string]string, spec any, ver string) []byte {
	b, err := json.Marshal(object{APIVersion: group + "/" + version, Kind: kinds[res], Metadata: meta{Name: name, ResourceVersion: ver, Labels: labels}, Spec: spec})
	if err != nil {
		panic(err)
	}
	return b
}

func rvOf(raw []byte) (string, error) {
	var o struct {
		Metadata meta `json:"metadata"`
	}
	if err := json.Unmarshal(raw, &o); err != nil {
		return "", err
	}
	return o.Metadata.ResourceVersion, nil
}

func kubeErr(err error) error {
	if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("%w: %v", errConflict, err)
	}
	return err
}

func (k *kubeStore) create(ctx context.Context, res, name string, labels map[string]string, spec any) (string, error) {
	raw, err := k.rc.Post().Resource(res).Body(body(res, name, labels, spec, "")).Do(ctx).Raw()
	if err != nil {
		return "", kubeErr(err)
	}
	return rvOf(raw)
}

func (k *kubeStore) update(ctx context.Context, res, name string, labels map[string]string, prev, spec any, ver string) (string, error) {
	var raw []byte
	var err error
	if k.patch {
		p, _ := json.Marshal(map[string]any{"metadata": map[string]any{"resourceVersion": ver}, "spec": nodePatch(prev.(nodeSpec), spec.(nodeSpec))})
		raw, err = k.rc.Patch(types.MergePatchType).Resource(res).Name(name).Body(p).Do(ctx).Raw()
	} else {
		raw, err = k.rc.Put().Resource(res).Name(name).Body(body(res, name, labels, spec, ver)).Do(ctx).Raw()
	}
	if err != nil {
		return "", kubeErr(err)
	}
	return rvOf(raw)
}

func (k *kubeStore) get(ctx context.Context, res, name string) ([]byte, string, error) {
	raw, err := k.rc.Get().Resource(res).Name(name).Do(ctx).Raw()
	if err != nil {
		return nil, "", err
	}
	var o struct {
		Metadata meta            `json:"metadata"`
		Spec     json.RawMessage `json:"spec"`
	}
	if err := json.Unmarshal(raw, &o); err != nil {
		return nil, "", err
	}
	return o.Spec, o.Metadata.ResourceVersion, nil
}

func (k *kubeStore) delete(ctx context.Context, res, name, ver string) error {
	opts, _ := json.Marshal(metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &ver}})
	return kubeErr(k.rc.Delete().Resource(res).Name(name).Body(opts).Do(ctx).Error())
}

// etcdStore keeps the same specs as JSON values under keys in ipkeeper's
// etcd backend (internal/store/etcd), compare-and-swap on mod revision.
type etcdStore struct{ s *etcd.Store }

func (e *etcdStore) name() string { return "etcd" }

func key(res, name string) string { return res + "/" + name }

func (e *etcdStore) txn(ctx context.Context, k string, spec any, v int64) (string, error) {
	b, _ := json.Marshal(spec)
	rev, err := e.s.TxnRevision(ctx, []kv.Cond{{Key: k, Version: v}}, []kv.Op{{Key: k, Value: b}})
	if errors.Is(err, store.ErrConflict) {
		return "", fmt.Errorf("%w: %v", errConflict, err)
	}
	if err != nil {
		return "", err
	}
	if rev == 0 {
		_, ver, err := e.get(ctx, "", k)
		return ver, err
	}
	return strconv.FormatInt(rev, 10), nil
}

func (e *etcdStore) create(ctx context.Context, res, name string, _ map[string]string, spec any) (string, error) {
	return e.txn(ctx, key(res, name), spec, 0)
}

func (e *etcdStore) update(ctx context.Context, res, name string, _ map[string]string, _, spec any, ver string) (string, error) {
	v, err := strconv.ParseInt(ver, 10, 64)
	if err != nil {
		return "", err
	}
	return e.txn(ctx, key(res, name), spec, v)
}

func (e *etcdStore) get(ctx context.Context, res, name string) ([]byte, string, error) {
	k := name
	if res != "" {
		k = key(res, name)
	}
	es, err := e.s.Get(ctx, k)
	if err != nil {
		return nil, "", err
	}
	return es[0].Value, strconv.FormatInt(es[0].Version, 10), nil
}

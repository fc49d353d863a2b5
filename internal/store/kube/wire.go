package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	"github.com/ipkeeper/ipkeeper/internal/store"
)

// meta is the part of an object's metadata the backend writes and reads.
// An update replaces the whole object: labels, annotations or finalizers
// that others add do not survive it (the backend owns these objects).
type meta struct {
	Name            string            `json:"name"`
	ResourceVersion string            `json:"resourceVersion,omitempty"`
	Labels          map[string]string `json:"labels,omitempty"`
	Annotations     map[string]string `json:"annotations,omitempty"`
}

// AnnotationWrite carries a random value that every create and update
// changes. The API server answers a PUT that changes nothing with the
// object as it was, resourceVersion included; the contract wants a new
// version for every write (pool removal writes a holder's node object
// unchanged so that an allocation that read it before fails its
// compare-and-swap). It also tells a write whose answer was lost: when
// the object holds the value the write sent, the write was stored.
const AnnotationWrite = "ipkeeper.io/write"

// writeNonce returns a fresh AnnotationWrite value.
func writeNonce() string { return strconv.FormatUint(rand.Uint64(), 36) }

// object is one CustomResource as sent and received; the spec is the
// contract's own encoding, decoded by the caller (so that a bad spec is
// reported with its object's name).
type object struct {
	APIVersion string          `json:"apiVersion"`
	Kind       string          `json:"kind"`
	Metadata   meta            `json:"metadata"`
	Spec       json.RawMessage `json:"spec"`
	// Summary is what `kubectl get` shows of a block's state (printer
	// columns cannot count): recomputed on every write of the state,
	// never read.
	Summary *blockSummary `json:"summary,omitempty"`
}

type objectList struct {
	Metadata struct {
		Continue string `json:"continue,omitempty"`
	} `json:"metadata"`
	Items []object `json:"items"`
}

// kind is one of the three resources.
type kind struct {
	resource, kind string
}

var (
	kindPool  = kind{ResourcePools, "IPAMPool"}
	kindBlock = kind{ResourceBlocks, "IPAMBlock"}
	kindNode  = kind{ResourceNodes, "IPAMNode"}
)

// listPage is how many objects one LIST request returns.
const listPage = 500

func (s *Store) newObject(k kind, name string, labels map[string]string, spec []byte, version store.Version) ([]byte, error) {
	return s.newObjectSummary(k, name, labels, spec, version, nil)
}

func (s *Store) newObjectSummary(k kind, name string, labels map[string]string, spec []byte, version store.Version, sum *blockSummary) ([]byte, error) {
	if labels == nil {
		labels = map[string]string{}
	}
	if s.prefix != "" {
		labels[LabelPartition] = s.prefix
	}
	size := 0
	for k, v := range labels {
		size += len(k) + len(v) + 6
	}
	if size > maxLabelBytes {
		return nil, fmt.Errorf("%w: %s %q: %d bytes of labels, the limit is %d", store.ErrTooLarge, k.kind, name, size, maxLabelBytes)
	}
	annotations := map[string]string{AnnotationWrite: writeNonce()}
	if sum != nil && sum.converted {
		annotations[AnnotationConverted] = "true"
	}
	// The spec is this package's own encoding, valid JSON: it is spliced
	// into the envelope, not checked and compacted again by json.Marshal
	// (a quarter of the time to build a 60-handle node's body).
	head, err := json.Marshal(envelope{
		APIVersion: Group + "/" + Version,
		Kind:       k.kind,
		Metadata:   meta{Name: name, ResourceVersion: string(version), Labels: labels, Annotations: annotations},
		Summary:    sum,
	})
	if err != nil {
		return nil, err
	}
	body := make([]byte, 0, len(head)+len(`,"spec":`)+len(spec))
	body = append(body, head[:len(head)-1]...)
	body = append(body, `,"spec":`...)
	body = append(body, spec...)
	return append(body, '}'), nil
}

// envelope is an object as sent, but its spec (see newObjectSummary).
type envelope struct {
	APIVersion string        `json:"apiVersion"`
	Kind       string        `json:"kind"`
	Metadata   meta          `json:"metadata"`
	Summary    *blockSummary `json:"summary,omitempty"`
}

// do sends req and returns the answer's body, or the error — the API
// server's Status decoded (Raw alone gives only what the status code
// says).
func do(ctx context.Context, req *rest.Request) ([]byte, error) {
	res := req.Do(ctx)
	raw, err := res.Raw()
	if err != nil {
		return nil, res.Error()
	}
	return raw, nil
}

func what(k kind, name string) string { return k.kind + " " + strconv.Quote(name) }

// checkPartition refuses an object of another partition (an unprefixed
// store's object whose name happens to start with this store's prefix and
// a dot, or the other way round).
func (s *Store) checkPartition(k kind, o *object) error {
	if got := o.Metadata.Labels[LabelPartition]; got != s.prefix {
		return fmt.Errorf("%w: %s belongs to partition %q, not %q", store.ErrCorrupt, what(k, o.Metadata.Name), got, s.prefix)
	}
	return nil
}

func decodeObject(k kind, name string, raw []byte) (*object, error) {
	var o object
	if err := json.Unmarshal(raw, &o); err != nil {
		return nil, fmt.Errorf("%w: %s: undecodable answer: %v", store.ErrCorrupt, what(k, name), err)
	}
	return &o, nil
}

func (s *Store) get(ctx context.Context, k kind, name string) (*object, error) {
	return s.getAt(ctx, k, name, false)
}

// getAt GETs name; cached accepts the API server's watch cache, which
// may lag behind the latest write (resourceVersion "0") and costs the
// server less than half a read of the latest state.
func (s *Store) getAt(ctx context.Context, k kind, name string, cached bool) (*object, error) {
	req := s.rc.Get().Resource(k.resource).Name(name)
	if cached {
		req = req.Param("resourceVersion", "0")
	}
	raw, err := do(ctx, req)
	if err != nil {
		return nil, mapErr(what(k, name), err)
	}
	o, err := decodeObject(k, name, raw)
	if err != nil {
		return nil, err
	}
	return o, s.checkPartition(k, o)
}

// metadataAnswer asks the API server to answer a write with the object's
// metadata only (a PartialObjectMetadata): a write needs the new
// resourceVersion, not the spec it just sent back.
const metadataAnswer = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"

// create POSTs body and returns the new version.
func (s *Store) create(ctx context.Context, k kind, name string, body []byte) (store.Version, error) {
	raw, err := do(ctx, s.rc.Post().Resource(k.resource).SetHeader("Accept", metadataAnswer).Body(body))
	if err != nil {
		return s.resolve(ctx, k, name, body, err)
	}
	return versionOf(k, name, raw)
}

// update PUTs body (carrying the version it replaces) and returns the new
// version.
func (s *Store) update(ctx context.Context, k kind, name string, body []byte) (store.Version, error) {
	raw, err := do(ctx, s.rc.Put().Resource(k.resource).Name(name).SetHeader("Accept", metadataAnswer).Body(body))
	if err != nil {
		return s.resolve(ctx, k, name, body, err)
	}
	return versionOf(k, name, raw)
}

// patchOp is one operation of a JSON Patch (RFC 6902).
type patchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

// pointerEscape escapes a key for a JSON Pointer (RFC 6901) path.
var pointerEscape = strings.NewReplacer("~", "~0", "/", "~1")

// patch sends ops as a JSON Patch of name, preconditioned on version:
// the patch first sets metadata.resourceVersion to it, which the API
// server compares with the stored object's (409 Conflict when it moved
// on, and nothing is written), and sets AnnotationWrite's value nonce by
// replacing the annotations. It returns the new version; a lost answer
// is resolved as for update.
func (s *Store) patch(ctx context.Context, k kind, name string, version store.Version, nonce string, ops []patchOp) (store.Version, error) {
	if version == "" {
		return "", fmt.Errorf("%w: %s: a patch needs the version it applies to", store.ErrInvalid, what(k, name))
	}
	all := make([]patchOp, 0, len(ops)+2)
	all = append(all,
		patchOp{Op: "replace", Path: "/metadata/resourceVersion", Value: string(version)},
		patchOp{Op: "add", Path: "/metadata/annotations", Value: map[string]string{AnnotationWrite: nonce}})
	all = append(all, ops...)
	body, err := json.Marshal(all)
	if err != nil {
		return "", fmt.Errorf("%w: %s: %v", store.ErrInvalid, what(k, name), err)
	}
	raw, err := do(ctx, s.rc.Patch(types.JSONPatchType).Resource(k.resource).Name(name).SetHeader("Accept", metadataAnswer).Body(body))
	if err != nil {
		return s.resolveNonce(ctx, k, name, nonce, err)
	}
	return versionOf(k, name, raw)
}

// resolve answers a create or update that failed with err. When no answer
// came (a transport error: the write may have been stored) and the
// context is still live, it reads the object back: holding the write's
// AnnotationWrite value, it is the write's result, and its version is
// returned. Otherwise the mapped error is returned — ErrUnavailable when
// the outcome stays unknown (not stored, or stored and written over since).
func (s *Store) resolve(ctx context.Context, k kind, name string, body []byte, err error) (store.Version, error) {
	mapped := mapErr(what(k, name), err)
	var st apierrors.APIStatus
	if errors.As(err, &st) || ctx.Err() != nil {
		return "", mapped
	}
	var sent struct {
		Metadata meta `json:"metadata"`
	}
	if json.Unmarshal(body, &sent) != nil {
		return "", mapped
	}
	return s.resolveNonce(ctx, k, name, sent.Metadata.Annotations[AnnotationWrite], err)
}

// resolveNonce is resolve for a write that sent AnnotationWrite's value
// nonce.
func (s *Store) resolveNonce(ctx context.Context, k kind, name, nonce string, err error) (store.Version, error) {
	mapped := mapErr(what(k, name), err)
	var st apierrors.APIStatus
	if errors.As(err, &st) || ctx.Err() != nil || nonce == "" {
		return "", mapped
	}
	o, gerr := s.get(ctx, k, name)
	if gerr != nil || o.Metadata.Annotations[AnnotationWrite] != nonce || o.Metadata.ResourceVersion == "" {
		return "", fmt.Errorf("%w (outcome unknown)", mapped)
	}
	return store.Version(o.Metadata.ResourceVersion), nil
}

func versionOf(k kind, name string, raw []byte) (store.Version, error) {
	var o struct {
		Metadata meta `json:"metadata"`
	}
	if err := json.Unmarshal(raw, &o); err != nil || o.Metadata.ResourceVersion == "" {
		return "", fmt.Errorf("%w: %s: the write's answer holds no resourceVersion (%v)", store.ErrUnavailable, what(k, name), err)
	}
	return store.Version(o.Metadata.ResourceVersion), nil
}

// del DELETEs name at version (a precondition).
func (s *Store) del(ctx context.Context, k kind, name string, version store.Version) error {
	v := string(version)
	body, err := json.Marshal(metav1.DeleteOptions{
		TypeMeta:      metav1.TypeMeta{Kind: "DeleteOptions", APIVersion: "v1"},
		Preconditions: &metav1.Preconditions{ResourceVersion: &v},
	})
	if err != nil {
		return err
	}
	_, err = do(ctx, s.rc.Delete().Resource(k.resource).Name(name).Body(body))
	return mapErr(what(k, name), err)
}

// noVersion answers an update or delete without a version: ErrNotFound
// when the object is absent, else ErrConflict (the caller's state is
// not the stored one). It never writes unconditionally.
func (s *Store) noVersion(ctx context.Context, k kind, name string) error {
	if _, err := s.get(ctx, k, name); err != nil {
		return err
	}
	return fmt.Errorf("%w: %s exists and no version was given", store.ErrConflict, what(k, name))
}

// selector returns the label selector of this partition and the given
// "key=value" or "key" requirements.
func (s *Store) selector(reqs ...string) string {
	part := "!" + LabelPartition
	if s.prefix != "" {
		part = LabelPartition + "=" + s.prefix
	}
	return strings.Join(append([]string{part}, reqs...), ",")
}

// list returns every object of k matching the label selector, page by
// page.
func (s *Store) list(ctx context.Context, k kind, selector string) ([]object, error) {
	return s.listAt(ctx, k, selector, false)
}

// listAt lists; cached lets the API server answer from its watch cache
// as it is (resourceVersion "0": no wait for the cache to catch up, which
// a current list of a resource written less often than others pays).
func (s *Store) listAt(ctx context.Context, k kind, selector string, cached bool) ([]object, error) {
	var out []object
	cont := ""
	for {
		req := s.rc.Get().Resource(k.resource).Param("labelSelector", selector).Param("limit", strconv.Itoa(listPage))
		switch {
		case cont != "":
			req = req.Param("continue", cont)
		case cached:
			req = req.Param("resourceVersion", "0")
		}
		raw, err := do(ctx, req)
		if err != nil {
			return nil, mapErr("list of "+k.resource+" ("+selector+")", err)
		}
		var l objectList
		if err := json.Unmarshal(raw, &l); err != nil {
			return nil, fmt.Errorf("%w: list of %s: undecodable answer: %v", store.ErrCorrupt, k.resource, err)
		}
		for i := range l.Items {
			if err := s.checkPartition(k, &l.Items[i]); err != nil {
				return nil, err
			}
		}
		out = append(out, l.Items...)
		if l.Metadata.Continue == "" {
			return out, nil
		}
		cont = l.Metadata.Continue
	}
}

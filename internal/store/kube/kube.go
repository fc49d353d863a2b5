// Package kube is the Kubernetes datastore: a store.Store over the
// cluster-scoped CustomResources of group ipkeeper.io (deploy/crds.yaml) —
// IPAMPool (a pool), IPAMBlock (a block: its claim and, once its node
// uses it, its state), IPAMNode (a node's head: its loans) and
// IPAMReservation (reservations.go) — through client-go's REST client
// with the contract's own encodings as specs
// (store.MarshalPool, store.ClaimSpec, store.BlockSpec's free queue,
// store.FormatRecord). A node object is its IPAMNode and the state of its
// blocks; a write PUTs the objects it changes (nodewrite.go).
//
// Versions are resourceVersions: an update is a PUT carrying the version
// the caller read (the API server refuses it with 409 Conflict when the
// object moved on), a delete a DELETE with a resourceVersion precondition,
// a create a POST (409 AlreadyExists when the name is taken). Reads on an
// allocation's path are a GET (GetClaim, GetPool) or label-selector LISTs
// bounded by a node (GetNode: its IPAMBlocks, then a GET of its IPAMNode;
// ListClaims{Node}, ListNodes{LendsTo}); nothing lists the cluster except
// the selector-less lists the controller and `ipkeeperctl check` use.
//
// Names are mapped to legal object names and label values injectively
// (names.go); every read checks an object's content against the name it
// was read by, and every labelled list filters by content, so a hashed
// name or label never returns another object.
package kube

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"

	"github.com/ipkeeper/ipkeeper/internal/store"
)

// The API group and version of the CRDs.
const (
	Group   = "ipkeeper.io"
	Version = "v1beta1"
)

// The resources (plural names) of the CRDs.
const (
	ResourcePools  = "ipampools"
	ResourceBlocks = "ipamblocks"
	ResourceNodes  = "ipamnodes"
)

// Labels the backend sets. LabelPartition is on every object of a
// partitioned store; LabelNode and LabelPool on IPAMBlocks; LendsPrefix+<node>
// on IPAMBlocks whose state holds a record of that node's handle.
const (
	LabelPartition = "ipkeeper.io/partition"
	LabelNode      = "ipkeeper.io/node"
	LabelPool      = "ipkeeper.io/pool"
	LendsPrefix    = "lends.ipkeeper.io/"
	// StickyPrefix labels an IPAMBlock with each sticky identity its
	// records hold (the label's name is the identity, hashed).
	StickyPrefix = "sticky.ipkeeper.io/"
)

// MaxObjectBytes is Limits().MaxObjectBytes: the largest spec the backend
// sends. etcd refuses requests over 1.5 MiB by default
// (--max-request-bytes), and what the API server stores is the spec plus
// metadata: names, labels (up to maxLabelBytes, counted twice since
// managedFields lists every label key) and about 1 KiB of the rest. 1 MiB
// of spec leaves that headroom.
const MaxObjectBytes = 1 << 20

// MaxBlockAddrs is the most addresses a pool's blocks may have on this
// backend: a block's state holds a record per handle with an address in
// it, and at 1.5 KiB each (a typical pod's record is 250 to 350 bytes;
// the longest names Kubernetes allows make about 1 400,
// TestMaxBlockFits) the records of 512 addresses and the free queue stay
// within MaxObjectBytes. A pool with larger blocks is refused when it is
// created or updated.
const MaxBlockAddrs = 512

// maxLabelBytes bounds the labels of one object (a block lending to
// very many borrowers); over it a write is refused with ErrTooLarge.
const maxLabelBytes = 128 << 10

// Errors of this backend, beyond store's.
var (
	// ErrAccessDenied: the API server refused the credentials (401), or
	// RBAC or an admission policy refused the request (403). It is not
	// ErrUnavailable: retrying does not help; the ServiceAccount needs the
	// ClusterRole of deploy/rbac-datastore.yaml, and a node's credentials
	// write only what deploy/policy-node-writes.yaml lets that node write.
	// It wraps store.ErrDenied.
	ErrAccessDenied = fmt.Errorf("%w: the Kubernetes API refused access (check the credentials, the RBAC of deploy/rbac-datastore.yaml and, for a node's, deploy/policy-node-writes.yaml)", store.ErrDenied)
	// ErrNoCRD: the API server does not serve the resource: the CRDs of
	// deploy/crds.yaml are not installed (yet). It wraps ErrUnavailable.
	ErrNoCRD = fmt.Errorf("%w: the ipkeeper.io CustomResourceDefinitions are not installed (deploy/crds.yaml)", store.ErrUnavailable)
	// ErrBadConfig: Config cannot be used. It wraps store.ErrBadConfig.
	ErrBadConfig = fmt.Errorf("%w: kubernetes", store.ErrBadConfig)
)

// Config configures Open.
type Config struct {
	// Kubeconfig is the path of a kubeconfig; empty means in-cluster
	// (the pod's ServiceAccount).
	Kubeconfig string
	// Prefix partitions the cluster: when set (a DNS label), every
	// object name is "<Prefix>.<name>", every object carries the label
	// ipkeeper.io/partition=<Prefix>, and lists select only that
	// partition; when empty, lists select the objects without the label.
	// Two stores sharing a cluster use distinct prefixes (at most one
	// none).
	Prefix string
	// QPS and Burst rate-limit the client (client-go's defaults, 5 and
	// 10, when zero).
	QPS   float32
	Burst int
	// Timeout bounds each request (none when zero; the context still
	// does).
	Timeout time.Duration
}

// Store is the Kubernetes datastore.
type Store struct {
	rc     *rest.RESTClient
	names  namer
	prefix string
}

var _ store.Store = (*Store)(nil)

// Open loads the kubeconfig (or the in-cluster config) with RESTConfig,
// which refuses credential files another user could have written, and
// returns the store. It sends nothing: a missing CRD or RBAC shows on the
// first request.
func Open(cfg Config) (*Store, error) {
	if cfg.Prefix != "" && !IsDNSLabel(cfg.Prefix) {
		return nil, fmt.Errorf("%w: prefix %q is not a DNS-1123 label", ErrBadConfig, cfg.Prefix)
	}
	rc, err := RESTConfig(cfg.Kubeconfig)
	if err != nil && cfg.Kubeconfig == "" {
		return nil, fmt.Errorf("%w (no kubeconfig is named: the datastore's \"kubeconfig\")", err)
	}
	if err != nil {
		return nil, err
	}
	if cfg.QPS != 0 {
		rc.QPS = cfg.QPS
	}
	if cfg.Burst != 0 {
		rc.Burst = cfg.Burst
	}
	if cfg.Timeout != 0 {
		rc.Timeout = cfg.Timeout
	}
	return NewForConfig(rc, cfg.Prefix)
}

// NewForConfig returns the store over an existing client configuration
// (copied; its group, version and serializer are set here).
func NewForConfig(cfg *rest.Config, prefix string) (*Store, error) {
	if prefix != "" && !IsDNSLabel(prefix) {
		return nil, fmt.Errorf("%w: prefix %q is not a DNS-1123 label", ErrBadConfig, prefix)
	}
	c := rest.CopyConfig(cfg)
	c.GroupVersion = &schema.GroupVersion{Group: Group, Version: Version}
	c.APIPath = "/apis"
	c.ContentType = runtime.ContentTypeJSON
	c.AcceptContentTypes = runtime.ContentTypeJSON
	c.NegotiatedSerializer = codecs.WithoutConversion()
	if c.UserAgent == "" {
		c.UserAgent = "ipkeeper-store"
	}
	rc, err := rest.RESTClientFor(c)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadConfig, err)
	}
	return &Store{rc: rc, names: namer{prefix: prefix}, prefix: prefix}, nil
}

// codecs decode the API server's Status answers (errors) only: objects
// are JSON read into this package's own types.
var codecs = func() serializer.CodecFactory {
	s := runtime.NewScheme()
	metav1.AddToGroupVersion(s, schema.GroupVersion{Group: Group, Version: Version})
	return serializer.NewCodecFactory(s)
}()

// Limits: a node object is stored in parts (MaxNodeBytes 0), each
// IPAMBlock (a block's state: its free queue and the records of its
// addresses) and each pool at most MaxObjectBytes of spec; what one write
// of a node object changes is bounded by the same number (MaxWriteBytes),
// as a write sends at least that. A pool whose blocks could hold more is
// refused (MaxBlockAddrs).
func (s *Store) Limits() store.Limits {
	return store.Limits{MaxObjectBytes: MaxObjectBytes, MaxWriteBytes: MaxObjectBytes}
}

// Close releases idle connections.
func (s *Store) Close() error {
	if c := s.rc.Client; c != nil {
		c.CloseIdleConnections()
	}
	return nil
}

// Prefix returns the store's partition ("" for none).
func (s *Store) Prefix() string { return s.prefix }
